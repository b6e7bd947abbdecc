"""The memory-mapped index that server workers share: same answers as a loaded copy, and the file is mapped (not
copied) into the process."""

import numpy as np

from retrieval.index import ItemIndex
from retrieval.index.run_index import build_run_index
from retrieval.serving import CandidateGenerator
from retrieval.serving.demo_run import write_demo_run


def test_a_memory_mapped_index_answers_like_a_loaded_one_and_is_mapped(tmp_path):
    paths = write_demo_run(tmp_path / "run")
    build_run_index(paths, factory="IVF4,PQ16x4fsr,RFlat", recall_floor=0.5)
    loaded, mapped = ItemIndex.load(paths.index), ItemIndex.load(paths.index, mmap=True)
    queries = np.random.default_rng(0).standard_normal([20, loaded.dimension]).astype(np.float32)
    a, b = loaded.search(queries, 10), mapped.search(queries, 10)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.scores, b.scores)
    with open("/proc/self/maps") as maps:
        assert str(paths.index / "index.faiss") in maps.read()
    plain, shared = CandidateGenerator.from_run(paths.root), CandidateGenerator.from_run(paths.root, mmap_index=True)
    for user in ("u1", "u7", "cold"):
        assert plain.recommend(user, k=5).item_ids.tolist() == shared.recommend(user, k=5).item_ids.tolist()
