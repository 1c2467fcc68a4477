import runpy
import pytest
from storage.stores.redis import RedisChatStorage
pytestmark = pytest.mark.anyio

@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_smoke(redis_url, anyio_backend):
    ns = runpy.run_path("/tmp/smoke.py", run_name="x")
    store = RedisChatStorage(redis_url, prefix="smoke1")
    await ns["main"](store)
    print(await store.fetch_timeline(ns["ChatKey"]("u","s","a")))
    await store.aclose()
