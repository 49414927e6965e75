"""Native n-gram lookup core (C++, see native/). Token arrays are int32 numpy arrays (any
array-like is converted); results are int32 numpy arrays. Follower arrays have shape (k, 2):
column 0 the token id, column 1 its count, rows sorted by token id. All C++ work runs without
the GIL.

Drafting reads up to three caches, one per DraftSource: the request's own text (context), the
workspace's files (workspace: an NgramCache kept current, or a WorkspaceView of a folder table
on disk with the changes on top) and a repository's prebuilt file (repository, a StaticCache)."""

import enum
from typing import Optional, Sequence

import numpy as np
import numpy.typing as npt

TokenArray = npt.ArrayLike

NGRAM_MIN: int  # 1
NGRAM_MAX: int  # 4
STATIC_NGRAM: int  # 2
STATIC_FORMAT_VERSION: int
STATIC_MAGIC: bytes  # the first 8 bytes of a static cache file

class DraftSource(enum.IntEnum):
    """Which cache decided a drafted token; the ids in column 0 of the evidence arrays. A
    source compares equal to its id and indexes sequences by it."""

    context = 0
    workspace = 1
    repository = 2

class CacheError(ValueError):
    """A cache file that cannot be used; the message is one line naming the file and the reason."""

class NgramCache:
    """Mutable n-gram cache for n = 1..4: the per-request context cache and the workspace
    cache. Keys whose last follower is removed disappear."""

    def __init__(self, n_vocab: int) -> None: ...
    @property
    def n_vocab(self) -> int: ...
    @property
    def n_keys(self) -> int: ...
    @property
    def n_followers(self) -> int: ...
    @property
    def total_count(self) -> int: ...
    @property
    def memory_bytes(self) -> int: ...
    def add(self, tokens: TokenArray, first: int = 0) -> None:
        """Count every n-gram whose follower sits at index >= first (its key may start before
        first): add(seq) then add(seq_longer, first=len(seq)) equals add(seq_longer).
        ValueError if a token is outside [0, n_vocab)."""
    def remove(self, tokens: TokenArray, first: int = 0) -> int:
        """Undo add(tokens, first). Returns how many n-gram occurrences were not present
        (0 whenever the same tokens were added before)."""
    def merge(self, other: "NgramCache") -> None: ...
    def clear(self) -> None: ...
    def followers(self, key: Sequence[int]) -> np.ndarray:
        """Followers of a 1..4-token key (a copy); empty (0, 2) array if absent."""
    def to_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(keys (K, 4) int32 padded with -1, offsets (K + 1,) int64, followers (F, 2) int32),
        keys in ascending order of their padded token tuples; key i owns
        followers[offsets[i]:offsets[i + 1]]."""
    def save_upstream(self, path: str) -> None:
        """Write llama.cpp's lookup cache format (llama-lookup-create), atomically."""
    @staticmethod
    def load_upstream(path: str, n_vocab: int) -> "NgramCache":
        """Read llama.cpp's lookup cache format; CacheError if malformed or not a regular
        file."""
    def __eq__(self, other: object) -> bool: ...

class StaticCache:
    """The static cache: a read-only 2-gram cache. open() checks the header against the
    file's size, and the section bounds with a few small reads, before anything large is read;
    then the file is read into private memory (the file's size), or, with a store, served from a
    verified private copy in the store that is mapped, so nothing done to the file afterwards
    changes or crashes it. verify() checks the whole-file checksum and every structural
    invariant. Drafting refuses a cache that has not been verified."""

    @staticmethod
    def open(
        path: str,
        n_vocab: Optional[int] = None,
        fingerprint: Optional[int] = None,
        *,
        store: Optional[str] = None,
    ) -> "StaticCache":
        """CacheError if the file is missing, not a regular file (a symbolic link is not
        followed, a FIFO is refused without waiting), truncated, of another format version,
        inconsistent with its size, or (when given) built for another vocabulary size or
        tokenizer fingerprint. store: a folder of the user's only (created 0700 if missing);
        the store's copy of a file with this header is mapped, verified already (O(1)), else
        the file is checked whole (read through bounded buffers, nothing written), then copied
        there and mapped, and the copy kept once verify() passes. With a store, a file that
        fails the check, or a store that cannot take it (its folder, a full disk), raises
        CacheError: the file is never read into private memory instead."""
    def verify(self) -> None: ...
    @property
    def storage(self) -> str:
        """Where the bytes are: "memory" (read into private memory), "stored copy" (the
        store's verified copy, mapped), "new copy" (copied into the store by this open)."""
    def changed_on_disk(self) -> bool:
        """Whether the path now holds another file, or the same one modified, or nothing: a
        stat (device, inode, size, modification and change times) compared with the file
        open() read. Open the path again to follow the change. ValueError once closed."""
    @property
    def verified(self) -> bool: ...
    @property
    def path(self) -> str: ...
    @property
    def header(self) -> dict[str, int]:
        """format_version, ngram_order, n_vocab, fingerprint, n_keys, n_followers, n_buckets,
        total_count, file_size, checksum."""
    def followers(self, t0: int, t1: int) -> np.ndarray:
        """Followers of the 2-gram (t0, t1): a read-only view into the cache's memory."""
    def to_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As NgramCache.to_arrays (keys padded with -1 after the two tokens)."""
    def save_upstream(self, path: str) -> None: ...
    def close(self) -> None:
        """Releases the memory (once no follower view still shows it); later calls raise
        ValueError."""

class StaticCacheBuilder:
    """Counts 2-grams of many documents (no 2-gram spans two documents) and writes a static
    cache file. Peak memory stays within a small multiple of the final file."""

    def __init__(self, n_vocab: int) -> None: ...
    def add(self, tokens: TokenArray) -> None: ...
    def add_cache(self, cache: NgramCache) -> None:
        """Add the 2-gram entries of a mutable cache (e.g. one loaded from upstream)."""
    def add_entries(
        self, words: npt.NDArray[np.uint64], counts: npt.NDArray[np.uint32]
    ) -> None:
        """Add entries another builder handed out with take_entries (a partial result of a
        distributed build); counts add up. ValueError unless words ascend strictly, every
        token is below n_vocab and every count is above zero."""
    def take_entries(self) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]:
        """(words, counts): every 2-gram counted so far as packed (t0, t1, follower) words,
        ascending, with their counts. The builder keeps no entries afterwards (n_tokens
        stays), so taking twice gives nothing the second time."""
    @property
    def n_tokens(self) -> int: ...
    @property
    def memory_bytes(self) -> int: ...
    def write(self, path: str, fingerprint: int) -> dict[str, int]:
        """Write atomically (temp file + rename); returns the header fields."""

def draft(
    tokens: TokenArray,
    n_draft: int,
    context: Optional[NgramCache] = None,
    workspace: Optional[NgramCache | WorkspaceView] = None,
    repository: Optional[StaticCache] = None,
) -> np.ndarray:
    """Up to n_draft tokens predicted to follow `tokens` (llama.cpp's lookup semantics:
    context with lax thresholds, then workspace with strict ones, both weighted by the
    repository followers, then repository alone). Ties go to the lowest token id. Only the last
    4 tokens are read; fewer than 2 tokens draft nothing."""

def draft_with_evidence(
    tokens: TokenArray,
    n_draft: int,
    context: Optional[NgramCache] = None,
    workspace: Optional[NgramCache | WorkspaceView] = None,
    repository: Optional[StaticCache] = None,
) -> tuple[np.ndarray, np.ndarray]:
    """draft() and, per drafted token, why: an (n, 4) int64 array of the deciding DraftSource
    id, the n-gram size of its key, the chosen follower's count and the key's total count."""

def draft_tree(
    tokens: TokenArray,
    n_draft: int,
    max_branches: int = 3,
    context: Optional[NgramCache] = None,
    workspace: Optional[NgramCache | WorkspaceView] = None,
    repository: Optional[StaticCache] = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A small token tree of continuations: (tokens, parents, evidence), evidence as in
    draft_with_evidence (a branch's first node: the key that offered it); parents[i] the index
    of node i's parent or -1 for a child of the last known token; parents come before children
    and each branch's nodes are contiguous. Branch 0 is exactly draft(); then, depth by depth
    along it, each other token that qualifies at that depth starts a branch continued greedily,
    up to max_branches branches (at most 16)."""

def replay(
    tokens: TokenArray,
    n_ctx: int,
    n_draft: int,
    workspace: Optional[NgramCache] = None,
    repository: Optional[StaticCache] = None,
    max_branches: int = 1,
) -> dict[str, int]:
    """llama-lookup-stats' method over pre-tokenized text: n_predict, n_drafted, n_accept,
    draft_ns. `workspace` is updated with each chunk's context cache, as upstream does (its
    "dynamic" cache). With max_branches > 1 (at most 16) each step drafts a token tree
    (draft_tree) and keeps its longest-matching branch; n_drafted then counts all tree nodes."""

class FolderTable:
    """A workspace folder's n-grams (n = 1..4) on disk, mapped: opening one of any size is O(1),
    and every process of the user that maps it shares its pages. Keys whose total count is below
    the table's min_count were left out. Reading never trusts the bytes: any file gives wrong
    followers at worst, never a crash or a token outside the vocabulary."""

    @staticmethod
    def open(path: str, n_vocab: int, fingerprint: int) -> "FolderTable":
        """CacheError if the file is missing, not a regular file owned by this user, truncated,
        of another format, or made for another vocabulary or tokenizer."""
    def verify(self) -> None:
        """CacheError when the checksum does not match."""
    @property
    def path(self) -> str: ...
    @property
    def header(self) -> dict[str, int]:
        """format_version, bucket_bits, n_vocab, min_count, fingerprint, n_keys, file_size."""
    def followers(self, key: Sequence[int]) -> np.ndarray: ...

class WorkspaceView:
    """The workspace source in layers: table + added - removed, per follower, never below 0."""

    def __init__(
        self, added: NgramCache, removed: Optional[NgramCache] = None, table: Optional[FolderTable] = None
    ) -> None: ...
    @property
    def table(self) -> Optional[FolderTable]: ...
    def followers(self, key: Sequence[int]) -> np.ndarray: ...

def build_folder_table(
    documents: Sequence[TokenArray],
    path: str,
    n_vocab: int,
    fingerprint: int,
    *,
    memory_limit: int,
    min_count: int = 2,
    release_pages: bool = False,
    threads: int = 1,
) -> dict[str, int]:
    """Counts the documents' n-grams within about memory_limit bytes (in as many passes as that
    takes, each pass after the first shared among `threads`) and writes the table atomically.
    release_pages: the documents are views of one read-only file mapping, whose pages are
    given back as they are read. Returns n_tokens,
    n_keys, n_keys_seen, units, passes, file_size, peak_bytes. OSError when it cannot be
    written; ValueError for a bad token."""

PASS_INTERRUPT_CALLBACK: int  # the address of a ggml_abort_callback whose data is a PassInterrupt

class PassInterrupt:
    """A flag raised from any thread that ends the model pass under way within one graph node
    (llama.cpp's CPU backend asks PASS_INTERRUPT_CALLBACK after each node; `address` is the
    callback's data). Once raised it stays raised."""

    def __init__(self) -> None: ...
    def raise_(self) -> None: ...
    @property
    def raised(self) -> bool: ...
    @property
    def address(self) -> int: ...

def token_pieces(to_piece: int, vocab: int, n_vocab: int) -> tuple[bytes, npt.NDArray[np.uint32]]:
    """Every token's text as the model writes it (llama_token_to_piece, whose address is
    to_piece, on the llama_vocab at `vocab`): token i is bytes[offsets[i]:offsets[i + 1]]."""

def vocabulary_record(text: int, attr: int, vocab: int, n_vocab: int) -> bytes:
    """For each token in order: its stored text's length (uint32 LE), its attributes (int32 LE)
    and the text (llama_vocab_get_text and llama_vocab_get_attr at `text` and `attr`)."""

def ids_by_text(bytes: bytes, offsets: npt.ArrayLike) -> npt.NDArray[np.int32]:
    """The ids of the tokens with a non-empty text (as token_pieces returns them), ordered by
    their bytes, ties by id. ValueError unless offsets ascend from 0 to len(bytes)."""

def query_terms(text: bytes, left_out: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """The hashes of text's terms (pieces of its identifiers, runs of ASCII letters, digits and
    `_`, cut at `_` and where a lowercase letter meets an uppercase one, lowercased, of 3
    characters or more) that start with a letter and are not in left_out (sorted hashes, as this
    returns them): sorted, distinct. ValueError unless left_out is sorted and distinct."""

class TextWindows:
    """text's blocks of block_lines lines (split at `\n`), each known by its distinct terms not
    in left_out (sorted hashes); window w is blocks w and w + 1 (native/text_windows.h)."""

    def __init__(self, text: bytes, block_lines: int, left_out: npt.ArrayLike) -> None: ...
    @property
    def windows(self) -> int: ...
    def similarities(self, query: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Each window's Jaccard similarity to query (sorted, distinct hashes, as query_terms
        returns them): the terms they share over the terms of either."""
