"""Chinese tokenisers: characters, jieba words, the content-hash cache (re-runs, crashes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import jieba
import pytest

from pipeline.data.text.segment import (
    CACHE_FILE,
    SegmentCache,
    Segmenter,
    cache_key,
    char_chunk,
    char_tokens,
    jieba_chunk,
    segment_texts,
)
from pipeline.io.parallel import ProcessMap, serial_map
from tests.helpers import REPO

P2P = "近日杭州一家P2P平台负责人失联，涉及投资人超过2000名，警方已介入调查。"
TEXTS = ["深圳地铁新线今日开通", P2P, "P2P平台跑路引关注", "深圳地铁新线今日开通"]


def test_char_tokens_keep_ascii_as_characters_and_drop_whitespace():
    assert char_tokens("2014年 P2P\u3000涨15％\n") == ["2", "0", "1", "4", "年", "P", "2", "P", "涨", "1", "5", "％"]
    assert char_chunk(["雅虎", " "]) == [["雅", "虎"], []]


def test_jieba_words_exact_with_and_without_hmm():
    assert segment_texts(TEXTS[:2]) == [
        ["深圳", "地铁", "新线", "今日", "开通"],
        [
            "近日",
            "杭州",
            "一家",
            "P2P",
            "平台",
            "负责人",
            "失联",
            "，",
            "涉及",
            "投资人",
            "超过",
            "2000",
            "名",
            "，",
            "警方",
            "已",
            "介入",
            "调查",
            "。",
        ],
    ]
    # Without the HMM jieba cannot join the out-of-dictionary word 失联.
    assert segment_texts([P2P], hmm=False)[0][5:8] == ["负责人", "失", "联"]
    # jieba emits spaces as tokens; they never reach a row.
    assert jieba_chunk(True, ["雅虎发布 P2P  hello\u3000x"]) == ["雅虎 发布 P2P hello x"]


def test_key_depends_on_text_hmm_and_jieba_version():
    keys = {cache_key("深圳", True), cache_key("深圳", False), cache_key("深圳", True, "0.41"), cache_key("深", True)}
    assert len(keys) == 4 and all(len(k) == 16 for k in keys)
    assert cache_key("深圳", True) == cache_key("深圳", True, jieba.__version__)


class CountingLcut:
    """Stands in for jieba.lcut (serial map: same process) and counts calls."""

    def __init__(self, real):
        self.real, self.calls = real, 0

    def __call__(self, text, *args, **kwargs):
        self.calls += 1
        return self.real(text, *args, **kwargs)


def test_second_run_makes_no_jieba_calls(tmp_path, monkeypatch):
    counter = CountingLcut(jieba.lcut)
    monkeypatch.setattr(jieba, "lcut", counter)
    chunks = [TEXTS[:2], TEXTS[2:], []]
    with Segmenter(True, tmp_path) as seg:
        first = list(seg.segment_chunks(iter(chunks), serial_map))
        assert seg.counts == {"texts": 4, "cache_hits": 1, "segmented": 3}  # the repeated text hits
        assert len(seg.cache) == 3
    assert counter.calls == 3
    with Segmenter(True, tmp_path) as seg:
        second = list(seg.segment_chunks(iter(chunks), serial_map))
        assert seg.counts == {"texts": 4, "cache_hits": 4, "segmented": 0}
    assert counter.calls == 3  # no new call
    assert second == first and first[2] == []
    assert first[1][0] == ["P2P", "平台", "跑", "路", "引", "关注"]
    with Segmenter(False, tmp_path) as seg:  # another HMM flag: its own entries
        list(seg.segment_chunks(iter(chunks), serial_map))
        assert seg.counts["segmented"] == 3
    assert counter.calls == 6


def test_repeated_text_in_a_chunk_is_segmented_once_without_cache(monkeypatch):
    counter = CountingLcut(jieba.lcut)
    monkeypatch.setattr(jieba, "lcut", counter)
    with Segmenter(True, None) as seg:
        out = next(seg.segment_chunks([TEXTS], serial_map))
    assert counter.calls == 3 and out[0] == out[3]


def test_process_pool_gives_the_serial_result_in_order(tmp_path):
    chunks = [[f"第{i}批次的新闻{i}号"] + TEXTS for i in range(6)]
    expected = [segment_texts(c) for c in chunks]
    with ProcessMap(2) as pool, Segmenter(True, tmp_path) as seg:
        assert list(seg.segment_chunks(iter(chunks), pool)) == expected


def test_chunks_are_pulled_lazily():
    pulled = []

    def chunks():
        for i in range(100):
            pulled.append(i)
            yield [f"文本{i}"]

    with Segmenter(True, None) as seg:
        stream = seg.segment_chunks(chunks(), serial_map)
        next(stream)
        assert pulled == [0]


_CRASH_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from pipeline.data.text.segment import SegmentCache
    cache = SegmentCache(sys.argv[1])
    cache.put_many((f"a{i}".encode(), f"词{i} 甲") for i in range(500))  # committed
    def half_then_die():
        for i in range(500):
            if i == 250:
                os._exit(9)  # killed in the middle of a transaction
            yield f"b{i}".encode(), f"词{i} 乙"
    cache.put_many(half_then_die())
    """
)

_LOOP_SCRIPT = textwrap.dedent(
    """
    import sys
    from pipeline.data.text.segment import SegmentCache
    cache = SegmentCache(sys.argv[1])
    n = 0
    while True:
        cache.put_many((f"k{n + i}".encode(), f"v{n + i} x") for i in range(200))
        n += 200
        if n == 1000:
            print("ready", flush=True)
    """
)


def _run(script: str, *args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", script, *args], env=env, cwd=REPO, **kwargs)


def test_cache_survives_a_crash_mid_write(tmp_path):
    assert _run(_CRASH_SCRIPT, str(tmp_path)).wait(timeout=60) == 9
    with SegmentCache(tmp_path) as cache:
        assert cache.integrity_ok()
        assert len(cache.get_many([f"a{i}".encode() for i in range(500)])) == 500
        assert cache.get_many([f"b{i}".encode() for i in range(500)]) == {}  # rolled back whole
        assert cache.get_many([b"a7"]) == {b"a7": "词7 甲"}
        cache.put_many([(b"b1", "词1 乙")])  # still writable
        assert len(cache) == 501


def test_cache_survives_sigkill_during_writes(tmp_path):
    proc = _run(_LOOP_SCRIPT, str(tmp_path), stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    with SegmentCache(tmp_path) as cache:
        assert cache.integrity_ok()
        n = len(cache)
        assert n >= 1000 and n % 200 == 0  # whole transactions only
        got = cache.get_many([f"k{i}".encode() for i in range(n)])
        assert got == {f"k{i}".encode(): f"v{i} x" for i in range(n)}


def test_corrupt_cache_file_is_named(tmp_path):
    (tmp_path / CACHE_FILE).write_bytes(b"not a database, just bytes" * 100)
    with pytest.raises(RuntimeError, match=rf"{CACHE_FILE} is unreadable.*delete it"):
        SegmentCache(tmp_path)
