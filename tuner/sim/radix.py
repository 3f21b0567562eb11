"""The prefix cache: a radix tree of token blocks on the GPU, with an optional host tier (HiCache).

Prefixes are matched in blocks of ``block`` tokens (16, or the page size when larger), each
block keyed by a hash chained over all tokens before it, so a lookup costs one dict probe per
block. Matching at block granularity loses at most block - 1 tokens of a hit against sglang's
token-level tree; the simulator accepts that for a cheap tree.

Hybrid (Mamba-style) models can resume only where a recurrent state was saved, so a match ends at
the deepest block that carries a state:

- ``extra_buffer`` saves states every ``state_interval`` tokens (the track interval) during
  prefill, and at the last interval boundary of the finished sequence;
- ``no_buffer`` saves one state, where the finished sequence ends (a later turn of the same chat
  resumes there, a different question on the same system prompt does not).

States take slots of the Mamba pool; the slots the running requests do not use hold the cached
states, least recently used out first. With HiCache, blocks and states evicted from the GPU move
to host memory (by write policy) and a later hit loads them back over PCIe.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


class Node:
    __slots__ = (
        "children",
        "depth",
        "gpu_children",
        "hits",
        "key",
        "last_access",
        "lock",
        "on_gpu",
        "on_host",
        "parent",
        "state_gpu",
        "state_host",
    )

    def __init__(self, key: int, parent: Node | None, depth: int) -> None:
        self.key = key
        self.parent = parent
        self.depth = depth  # tokens from the root to the end of this block
        self.children = 0
        self.gpu_children = 0
        self.on_gpu = False
        self.on_host = False
        self.lock = 0
        self.last_access = 0.0
        self.hits = 0
        self.state_gpu = False
        self.state_host = False


@dataclass(frozen=True)
class Match:
    gpu_tokens: int  # usable from the GPU pool as is
    total_tokens: int  # usable including blocks (and a state) loaded back from host memory
    gpu_node: Node | None
    node: Node | None


NO_MATCH = Match(0, 0, None, None)


def block_keys(tokens: Sequence[int], block: int, start_key: int = 0, start: int = 0) -> list[int]:
    """Chained hashes of each full block of ``tokens`` from ``start`` (a block boundary)."""
    keys = []
    key = start_key
    for i in range(start, len(tokens) - block + 1, block):
        key = hash((key, tuple(tokens[i : i + block])))
        keys.append(key)
    return keys


class PrefixCache:
    def __init__(
        self,
        block: int,
        hybrid: bool,
        state_interval: int | None,
        host_tokens: int = 0,
        host_states: int = 0,
        write_policy: str = "write_through",
    ) -> None:
        self.block = block
        self.hybrid = hybrid
        self.state_interval = state_interval  # None: states only where sequences end
        self.host_capacity = host_tokens
        self.host_state_capacity = host_states
        self.write_policy = write_policy
        self.nodes: dict[int, Node] = {}
        self.gpu_tokens = 0
        self.locked_tokens = 0
        self.host_tokens = 0
        self.gpu_states: OrderedDict[int, Node] = OrderedDict()
        self.host_states: OrderedDict[int, Node] = OrderedDict()
        self._gpu_heap: list[tuple[float, int, Node]] = []
        self._host_heap: list[tuple[float, int, Node]] = []
        self._seq = itertools.count()
        # PCIe traffic since the last call to take_io(): tokens written to / loaded from host.
        self.pending_host_writes = 0
        self.pending_state_writes = 0

    # ---------------------------------------------------------------- queries
    @property
    def hicache(self) -> bool:
        return self.host_capacity > 0

    @property
    def evictable_tokens(self) -> int:
        return self.gpu_tokens - self.locked_tokens

    def match(self, keys: Sequence[int]) -> Match:
        gpu_len = total_len = 0
        gpu_node = node_at = None
        all_gpu = True
        nodes = self.nodes
        for key in keys:
            node = nodes.get(key)
            if node is None:
                break
            all_gpu = all_gpu and node.on_gpu
            usable_gpu = all_gpu and (node.state_gpu or not self.hybrid)
            if usable_gpu:
                gpu_len, gpu_node = node.depth, node
            if not self.hybrid or node.state_gpu or node.state_host:
                total_len, node_at = node.depth, node
        if total_len <= gpu_len:
            return Match(gpu_len, gpu_len, gpu_node, gpu_node)
        return Match(gpu_len, total_len, gpu_node, node_at)

    # ---------------------------------------------------------------- locks
    def lock(self, node: Node | None, now: float) -> None:
        block = self.block
        while node is not None:
            if node.lock == 0 and node.on_gpu:
                self.locked_tokens += block
            node.lock += 1
            node.last_access = now
            node = node.parent

    def unlock(self, node: Node | None) -> None:
        block = self.block
        while node is not None:
            node.lock -= 1
            if node.lock == 0 and node.on_gpu:
                self.locked_tokens -= block
                if node.gpu_children == 0:
                    self._push_gpu(node)
            node = node.parent

    def touch_state(self, node: Node | None) -> None:
        if node is not None and node.key in self.gpu_states:
            self.gpu_states.move_to_end(node.key)

    # ---------------------------------------------------------------- loading
    def load_from_host(self, node: Node) -> tuple[int, int]:
        """Bring the host part of ``node``'s path back to the GPU: (tokens, states) loaded.

        The caller has made room for the tokens in the GPU pool.
        """
        tokens = 0
        states = 0
        if self.hybrid and not node.state_gpu and node.state_host:
            self._set_state_gpu(node)
            states = 1
        path = []
        cur: Node | None = node
        while cur is not None and not cur.on_gpu:
            path.append(cur)
            cur = cur.parent
        for n in reversed(path):
            self._set_gpu(n, True)
            n.hits += 1
            tokens += self.block
        return tokens, states

    # ---------------------------------------------------------------- insert
    def insert(self, keys: Sequence[int], state_blocks: Sequence[int], now: float) -> int:
        """Cache a finished (or prefilled) sequence's blocks; returns GPU tokens newly cached.

        ``state_blocks``: indices into ``keys`` of the blocks that end where a state is saved.
        """
        added = 0
        parent: Node | None = None
        nodes = self.nodes
        depth = 0
        write_through = self.hicache and self.write_policy == "write_through"
        for key in keys:
            depth += self.block
            node = nodes.get(key)
            if node is None:
                node = Node(key, parent, depth)
                nodes[key] = node
                if parent is not None:
                    parent.children += 1
            if not node.on_gpu:
                self._set_gpu(node, True)
                added += self.block
            if write_through and not node.on_host:
                self._set_host(node, True)
                self.pending_host_writes += self.block
            node.last_access = now
            if node.gpu_children == 0 and node.lock == 0:
                self._push_gpu(node)
            parent = node
        if self.hybrid:
            for index in state_blocks:
                if 0 <= index < len(keys):
                    node = nodes.get(keys[index])
                    if node is not None:
                        self._set_state_gpu(node)
        return added

    def hit(self, node: Node | None) -> None:
        while node is not None:
            node.hits += 1
            node = node.parent

    # ---------------------------------------------------------------- eviction
    def evict_gpu(self, tokens: int, now: float) -> int:
        """Free at least ``tokens`` GPU tokens from unlocked blocks, least recently used first."""
        freed = 0
        heap = self._gpu_heap
        while freed < tokens and heap:
            stamp, _, node = heapq.heappop(heap)
            if not node.on_gpu or node.lock or node.gpu_children:
                continue
            if stamp != node.last_access:
                self._push_gpu(node)
                continue
            self._evict_node_gpu(node)
            freed += self.block
        return freed

    def trim_states(self, capacity: int) -> None:
        """Keep at most ``capacity`` recurrent states on the GPU (the free Mamba slots)."""
        capacity = max(capacity, 0)
        while len(self.gpu_states) > capacity:
            _, node = self.gpu_states.popitem(last=False)
            node.state_gpu = False
            if self.hicache and self.host_state_capacity > 0 and not node.state_host:
                self._add_host_state(node)

    def flush(self) -> None:
        self.nodes.clear()
        self.gpu_states.clear()
        self.host_states.clear()
        self._gpu_heap.clear()
        self._host_heap.clear()
        self.gpu_tokens = self.locked_tokens = self.host_tokens = 0

    def take_io(self) -> tuple[int, int]:
        """PCIe writes (tokens, states) queued since the last call, for the cost model."""
        out = (self.pending_host_writes, self.pending_state_writes)
        self.pending_host_writes = self.pending_state_writes = 0
        return out

    # ---------------------------------------------------------------- internals
    def _push_gpu(self, node: Node) -> None:
        heapq.heappush(self._gpu_heap, (node.last_access, next(self._seq), node))

    def _set_gpu(self, node: Node, value: bool) -> None:
        if node.on_gpu == value:
            return
        node.on_gpu = value
        delta = self.block if value else -self.block
        self.gpu_tokens += delta
        if node.lock:
            self.locked_tokens += delta
        if node.parent is not None:
            node.parent.gpu_children += 1 if value else -1
            if not value and node.parent.gpu_children == 0 and node.parent.lock == 0:
                self._push_gpu(node.parent)

    def _set_host(self, node: Node, value: bool) -> None:
        if node.on_host == value:
            return
        node.on_host = value
        self.host_tokens += self.block if value else -self.block
        if value:
            self._trim_host()

    def _set_state_gpu(self, node: Node) -> None:
        node.state_gpu = True
        self.gpu_states[node.key] = node
        self.gpu_states.move_to_end(node.key)

    def _add_host_state(self, node: Node) -> None:
        node.state_host = True
        self.host_states[node.key] = node
        self.pending_state_writes += 1
        while len(self.host_states) > self.host_state_capacity:
            _, old = self.host_states.popitem(last=False)
            old.state_host = False

    def _evict_node_gpu(self, node: Node) -> None:
        if self.hicache and not node.on_host:
            keep = self.write_policy == "write_back" or (
                self.write_policy == "write_through_selective" and node.hits > 0
            )
            if keep:
                self._set_host(node, True)
                self.pending_host_writes += self.block
        if node.state_gpu:
            self.gpu_states.pop(node.key, None)
            node.state_gpu = False
            if self.hicache and node.on_host and self.host_state_capacity > 0:
                self._add_host_state(node)
        self._set_gpu(node, False)
        if not node.on_host:
            self._delete(node)
        elif node.children == 0:
            heapq.heappush(self._host_heap, (node.last_access, next(self._seq), node))

    def _delete(self, node: Node) -> None:
        if self.nodes.get(node.key) is node:
            del self.nodes[node.key]
        if node.state_host:
            self.host_states.pop(node.key, None)
            node.state_host = False
        parent = node.parent
        if parent is not None:
            parent.children -= 1
            if parent.children == 0 and not parent.on_gpu and parent.on_host:
                heapq.heappush(self._host_heap, (parent.last_access, next(self._seq), parent))

    def _trim_host(self) -> None:
        heap = self._host_heap
        while self.host_tokens > self.host_capacity and heap:
            _, _, node = heapq.heappop(heap)
            if node.on_gpu or not node.on_host or node.children:
                continue
            self._set_host(node, False)
            self._delete(node)
