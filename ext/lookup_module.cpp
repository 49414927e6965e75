// Python bindings of the native lookup core: argument checks, locking and numpy conversion only.
#include "drafter.h"
#include "folder_table.h"
#include "folder_table_builder.h"
#include "ngram_cache.h"
#include "replay.h"
#include "static_cache.h"
#include "static_cache_builder.h"
#include "upstream_format.h"

#include <pybind11/native_enum.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;
using lookup::token_t;

namespace {

using TokenArray = py::array_t<token_t, py::array::c_style | py::array::forcecast>;

// Raised as lookahead_lsp._lookup.CacheError: "<path>: <reason>".
struct CacheError : std::runtime_error {
    CacheError(const std::string& path, const std::string& reason) : std::runtime_error(path + ": " + reason) {}
};

[[noreturn]] void raise_os_error(const std::string& path, const std::string& reason) {
    const std::string message = path + ": " + reason;
    PyErr_SetString(PyExc_OSError, message.c_str());
    throw py::error_already_set();
}

// Token ids from any array-like: integers only, 1-D, within int32 (checked before narrowing, so
// that 2**32 + 5 is refused rather than read as 5). int32 input is used without a copy.
TokenArray as_tokens(const py::object& token_ids) {
    py::array arr = py::array::ensure(token_ids);
    if (!arr) throw py::value_error("tokens must be an array of token ids");
    if (arr.ndim() != 1) throw py::value_error("tokens must be a 1-D array of token ids");
    const char kind = arr.dtype().kind();
    if (arr.size() > 0 && kind != 'i' && kind != 'u') {
        throw py::value_error("tokens must be integers, not " + py::str(arr.dtype()).cast<std::string>());
    }
    if (arr.size() > 0 && !(kind == 'i' && arr.itemsize() == 4)) {
        const auto low = arr.attr("min")().cast<long double>();
        const auto high = arr.attr("max")().cast<long double>();
        if (low < 0 || high > 0x7FFFFFFF) throw py::value_error("token ids must be in [0, 2**31)");
    }
    return TokenArray::ensure(arr);
}

void check_tokens(const token_t* tokens, size_t n, uint32_t n_vocab) {
    for (size_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= n_vocab) {
            throw py::value_error("token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                                  " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
        }
    }
}

uint32_t checked_vocab(int64_t n_vocab) {
    if (n_vocab <= 0 || n_vocab > 0x7FFFFFFF) throw py::value_error("n_vocab must be in [1, 2**31)");
    return static_cast<uint32_t>(n_vocab);
}

// A mutable cache with its vocabulary size and a reader/writer lock: the daemon drafts on one
// thread while its index thread adds and removes files.
struct PyNgramCache {
    explicit PyNgramCache(int64_t vocab) : n_vocab(checked_vocab(vocab)) {}

    lookup::NgramCache cache;
    uint32_t n_vocab;
    mutable std::shared_mutex mutex;
};

// The cache's bytes (a private copy or a mapping) are shared with every follower view handed to
// numpy, so close() (or the cache being collected) never frees memory an array still shows. The
// lock keeps close() from racing a drafting call on another thread.
struct PyStaticCache {
    std::shared_ptr<lookup::StaticCache> cache = std::make_shared<lookup::StaticCache>();
    std::string path;
    std::atomic<bool> verified{false};
    mutable std::shared_mutex mutex;

    // Call these with `mutex` held (shared or exclusive).
    const lookup::StaticCache& open_cache() const {
        if (!cache) throw py::value_error(path + ": static cache is closed");
        return *cache;
    }
    // Drafting and export read followers that only verify() has checked.
    const lookup::StaticCache& verified_cache() const {
        const lookup::StaticCache& open = open_cache();
        if (!verified.load()) throw py::value_error(path + ": static cache not verified yet (call verify() first)");
        return open;
    }
};

// A folder table never changes once open; the shared pointer keeps it mapped while a drafting
// call on another thread reads it.
struct PyFolderTable {
    std::shared_ptr<lookup::FolderTable> table = std::make_shared<lookup::FolderTable>();
    std::string path;
};

// The workspace draft source in its layers (workspace_layers.h); holds its parts alive.
struct PyWorkspaceView {
    py::object added_object, removed_object, table_object;
    PyNgramCache* added = nullptr;
    PyNgramCache* removed = nullptr;
    PyFolderTable* table = nullptr;
    uint32_t n_vocab = 0;
};

// What a `workspace` argument names: None, an NgramCache (the whole workspace) or a view.
struct WorkspaceArg {
    PyNgramCache* added = nullptr;
    PyNgramCache* removed = nullptr;
    PyFolderTable* table = nullptr;
    uint32_t n_vocab = 0;

    [[nodiscard]] bool given() const { return added != nullptr || table != nullptr; }
};

WorkspaceArg workspace_arg(const py::object& workspace) {
    WorkspaceArg arg;
    if (workspace.is_none()) return arg;
    if (py::isinstance<PyNgramCache>(workspace)) {
        arg.added = &workspace.cast<PyNgramCache&>();
        arg.n_vocab = arg.added->n_vocab;
    } else if (py::isinstance<PyWorkspaceView>(workspace)) {
        const auto& view = workspace.cast<PyWorkspaceView&>();
        arg = {view.added, view.removed, view.table, view.n_vocab};
    } else {
        throw py::type_error("workspace must be an NgramCache or a WorkspaceView");
    }
    return arg;
}

struct PyStaticCacheBuilder {
    explicit PyStaticCacheBuilder(int64_t vocab) : n_vocab(checked_vocab(vocab)), builder(n_vocab) {
        if (n_vocab > lookup::k_static_max_vocab) {
            throw py::value_error("vocabularies above " + std::to_string(lookup::k_static_max_vocab) +
                                  " tokens are not supported by the static cache");
        }
    }
    uint32_t n_vocab;
    lookup::StaticCacheBuilder builder;
};

// A builder's entries cross processes (a distributed build) as two numpy arrays: packed words
// (uint64) and counts (uint32). They arrive from other machines, so each is checked whole.
using WordArray = py::array_t<uint64_t, py::array::c_style>;
using CountArray = py::array_t<uint32_t, py::array::c_style>;

void add_builder_entries(PyStaticCacheBuilder& b, const py::array& words, const py::array& counts) {
    if (!py::isinstance<WordArray>(words) || !py::isinstance<CountArray>(counts) || words.ndim() != 1 ||
        counts.ndim() != 1) {
        throw py::value_error(
            "entries must be a contiguous 1-D uint64 array of words and a contiguous 1-D uint32 array of counts");
    }
    const auto w = WordArray::ensure(words);
    const auto c = CountArray::ensure(counts);
    if (w.size() != c.size()) throw py::value_error("entries must have as many counts as words");
    const size_t n = static_cast<size_t>(w.size());
    std::string error;
    bool ok;
    {
        py::gil_scoped_release nogil;
        ok = lookup::check_entries(w.data(), c.data(), n, b.n_vocab, &error);
        if (ok) b.builder.add_entries(w.data(), c.data(), n);
    }
    if (!ok) throw py::value_error(error);
}

// Hands the vectors to numpy without copying: each array owns its vector through a capsule.
template <class T>
py::array_t<T> owned_array(std::vector<T>&& values) {
    if (values.empty()) return py::array_t<T>(0);
    auto* owner = new std::vector<T>(std::move(values));
    py::capsule base(owner, [](void* p) { delete static_cast<std::vector<T>*>(p); });
    return py::array_t<T>(static_cast<py::ssize_t>(owner->size()), owner->data(), base);
}

py::tuple take_builder_entries(PyStaticCacheBuilder& b) {
    std::vector<uint64_t> words;
    std::vector<uint32_t> counts;
    {
        py::gil_scoped_release nogil;
        b.builder.take_entries(&words, &counts);
    }
    return py::make_tuple(owned_array(std::move(words)), owned_array(std::move(counts)));
}

py::array_t<token_t> followers_copy(const lookup::FollowerSpan& span) {
    const std::vector<lookup::Follower> followers = lookup::sorted_followers(span);
    py::array_t<token_t> out({static_cast<py::ssize_t>(followers.size()), py::ssize_t{2}});
    auto* p = out.mutable_data();
    for (size_t i = 0; i < followers.size(); ++i) {
        p[2 * i] = followers[i].token;
        p[2 * i + 1] = static_cast<token_t>(std::min<uint32_t>(followers[i].count, 0x7FFFFFFF));
    }
    return out;
}

// (keys (K, 4), offsets (K + 1), followers (F, 2)) sorted by key, for tests and tools.
struct CacheArrays {
    std::vector<lookup::NgramKey> keys;
    std::vector<std::vector<lookup::Follower>> followers;

    void add(lookup::NgramKey key, const lookup::FollowerSpan& span) {
        keys.push_back(key);
        followers.push_back(lookup::sorted_followers(span));
    }

    py::tuple to_numpy() const {
        std::vector<size_t> order(keys.size());
        std::iota(order.begin(), order.end(), size_t{0});
        std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
        size_t n_followers = 0;
        for (const auto& f : followers) n_followers += f.size();
        py::array_t<token_t> out_keys({static_cast<py::ssize_t>(keys.size()), py::ssize_t{4}});
        py::array_t<int64_t> out_offsets(static_cast<py::ssize_t>(keys.size() + 1));
        py::array_t<token_t> out_followers({static_cast<py::ssize_t>(n_followers), py::ssize_t{2}});
        token_t* k = out_keys.mutable_data();
        int64_t* o = out_offsets.mutable_data();
        token_t* f = out_followers.mutable_data();
        int64_t at = 0;
        for (size_t i = 0; i < order.size(); ++i) {
            for (int j = 0; j < 4; ++j) k[4 * i + j] = lookup::key_token(keys[order[i]], j);
            o[i] = at;
            for (const lookup::Follower& fw : followers[order[i]]) {
                f[2 * at] = fw.token;
                f[2 * at + 1] = static_cast<token_t>(std::min<uint32_t>(fw.count, 0x7FFFFFFF));
                ++at;
            }
        }
        o[order.size()] = at;
        return py::make_tuple(out_keys, out_offsets, out_followers);
    }
};

bool caches_equal(const lookup::NgramCache& a, const lookup::NgramCache& b) {
    if (a.n_keys() != b.n_keys() || a.n_followers() != b.n_followers() || a.total_count() != b.total_count()) {
        return false;
    }
    bool equal = true;
    a.for_each([&](lookup::NgramKey key, const lookup::FollowerSpan& fa) {
        if (!equal) return;
        const std::vector<lookup::Follower> x = lookup::sorted_followers(fa);
        const std::vector<lookup::Follower> y = lookup::sorted_followers(b.find(key));
        equal = std::equal(x.begin(), x.end(), y.begin(), y.end(), [](const auto& p, const auto& q) {
            return p.token == q.token && p.count == q.count;
        });
    });
    return equal;
}

// Checks what drafting will read: the repository cache must be verified and the last few tokens
// (the only ones drafting reads) must be inside every cache's vocabulary.
void check_draft_inputs(const TokenArray& tokens, const PyNgramCache* context, const WorkspaceArg& workspace,
                        const PyStaticCache* repository) {
    if (context != nullptr && workspace.given() && context->n_vocab != workspace.n_vocab) {
        throw py::value_error("the context and workspace caches have different vocabulary sizes");
    }
    const size_t n = static_cast<size_t>(tokens.size());
    const size_t tail = std::min<size_t>(n, lookup::k_ngram_max);
    if (context != nullptr) check_tokens(tokens.data() + n - tail, tail, context->n_vocab);
    if (workspace.given()) check_tokens(tokens.data() + n - tail, tail, workspace.n_vocab);
    if (repository != nullptr) {
        std::shared_lock l(repository->mutex);
        check_tokens(tokens.data() + n - tail, tail, repository->verified_cache().header().n_vocab);
    }
}

// Shared locks on the mutable sources for the length of one drafting call.
struct LockedSources {
    LockedSources(PyNgramCache* context, const WorkspaceArg& workspace, PyStaticCache* repository) {
        if (context != nullptr) context_lock = std::shared_lock(context->mutex);
        if (workspace.added != nullptr && workspace.added != context) {
            workspace_lock = std::shared_lock(workspace.added->mutex);
        }
        if (workspace.removed != nullptr && workspace.removed != context && workspace.removed != workspace.added) {
            removed_lock = std::shared_lock(workspace.removed->mutex);
        }
        if (repository != nullptr) {
            repository_lock = std::shared_lock(repository->mutex);
            // Closed by another thread since the inputs were checked.
            if (!repository->cache) throw std::invalid_argument(repository->path + ": static cache is closed");
        }
        const lookup::WorkspaceLayers layers{workspace.added ? &workspace.added->cache : nullptr,
                                             workspace.removed ? &workspace.removed->cache : nullptr,
                                             workspace.table ? workspace.table->table.get() : nullptr};
        sources = {context ? &context->cache : nullptr, layers, repository ? repository->cache.get() : nullptr};
    }
    lookup::DraftSources sources;
    std::shared_lock<std::shared_mutex> context_lock;
    std::shared_lock<std::shared_mutex> workspace_lock;
    std::shared_lock<std::shared_mutex> removed_lock;
    std::shared_lock<std::shared_mutex> repository_lock;
};

py::array_t<token_t> draft(const py::object& token_ids, int64_t n_draft, PyNgramCache* context, const py::object& workspace_object,
                           PyStaticCache* repository) {
    if (n_draft < 0) throw py::value_error("n_draft must be >= 0");
    const TokenArray tokens = as_tokens(token_ids);
    const WorkspaceArg workspace = workspace_arg(workspace_object);
    check_draft_inputs(tokens, context, workspace, repository);
    std::vector<token_t> out(static_cast<size_t>(n_draft));
    size_t n = 0;
    {
        py::gil_scoped_release nogil;
        LockedSources locked(context, workspace, repository);
        n = lookup::draft(tokens.data(), static_cast<size_t>(tokens.size()), locked.sources, out.size(), out.data());
    }
    return py::array_t<token_t>(static_cast<py::ssize_t>(n), out.data());
}

// Drafted tokens' evidence as an (n, 4) int64 array: DraftSource id, n-gram size, chosen
// count, key total.
py::array_t<int64_t> evidence_table(const std::vector<lookup::DraftEvidence>& evidence, size_t n) {
    py::array_t<int64_t> table({static_cast<py::ssize_t>(n), py::ssize_t{4}});
    auto rows = table.mutable_unchecked<2>();
    for (size_t i = 0; i < n; ++i) {
        const auto r = static_cast<py::ssize_t>(i);
        rows(r, 0) = static_cast<int64_t>(evidence[i].source);
        rows(r, 1) = evidence[i].ngram;
        rows(r, 2) = evidence[i].count;
        rows(r, 3) = evidence[i].sum;
    }
    return table;
}

py::tuple draft_with_evidence(const py::object& token_ids, int64_t n_draft, PyNgramCache* context,
                              const py::object& workspace_object, PyStaticCache* repository) {
    if (n_draft < 0) throw py::value_error("n_draft must be >= 0");
    const TokenArray tokens = as_tokens(token_ids);
    const WorkspaceArg workspace = workspace_arg(workspace_object);
    check_draft_inputs(tokens, context, workspace, repository);
    std::vector<token_t> out(static_cast<size_t>(n_draft));
    std::vector<lookup::DraftEvidence> evidence(out.size());
    size_t n = 0;
    {
        py::gil_scoped_release nogil;
        LockedSources locked(context, workspace, repository);
        n = lookup::draft(tokens.data(), static_cast<size_t>(tokens.size()), locked.sources, out.size(), out.data(),
                          evidence.data());
    }
    return py::make_tuple(py::array_t<token_t>(static_cast<py::ssize_t>(n), out.data()), evidence_table(evidence, n));
}

py::tuple draft_tree(const py::object& token_ids, int64_t n_draft, int64_t max_branches, PyNgramCache* context,
                     const py::object& workspace_object, PyStaticCache* repository) {
    if (n_draft < 0) throw py::value_error("n_draft must be >= 0");
    if (max_branches < 0 || max_branches > 16) throw py::value_error("max_branches must be in [0, 16]");
    const size_t capacity = static_cast<size_t>(n_draft) * static_cast<size_t>(max_branches);
    std::vector<token_t> out_tokens(capacity);
    std::vector<int32_t> out_parents(capacity);
    std::vector<lookup::DraftEvidence> evidence(capacity);
    const TokenArray tokens = as_tokens(token_ids);
    const WorkspaceArg workspace = workspace_arg(workspace_object);
    check_draft_inputs(tokens, context, workspace, repository);
    size_t n = 0;
    {
        py::gil_scoped_release nogil;
        LockedSources locked(context, workspace, repository);
        n = lookup::draft_tree(tokens.data(), static_cast<size_t>(tokens.size()), locked.sources,
                               static_cast<size_t>(n_draft), static_cast<size_t>(max_branches), out_tokens.data(),
                               out_parents.data(), evidence.data());
    }
    return py::make_tuple(py::array_t<token_t>(static_cast<py::ssize_t>(n), out_tokens.data()),
                          py::array_t<int32_t>(static_cast<py::ssize_t>(n), out_parents.data()),
                          evidence_table(evidence, n));
}

py::dict replay(const py::object& token_ids, int64_t n_ctx, int64_t n_draft, PyNgramCache* workspace,
                PyStaticCache* repository, int64_t max_branches) {
    if (n_ctx <= 0 || n_draft < 0) throw py::value_error("n_ctx must be > 0 and n_draft >= 0");
    if (max_branches < 1 || max_branches > 16) throw py::value_error("max_branches must be in [1, 16]");
    const TokenArray tokens = as_tokens(token_ids);
    check_draft_inputs(tokens, nullptr, WorkspaceArg{}, repository);
    const size_t n = static_cast<size_t>(tokens.size());
    // The replay's own context cache has no vocabulary; negative ids would alias key padding.
    check_tokens(tokens.data(), n, 0x7FFFFFFF);
    if (workspace != nullptr) check_tokens(tokens.data(), n, workspace->n_vocab);
    if (repository != nullptr) {
        std::shared_lock l(repository->mutex);
        check_tokens(tokens.data(), n, repository->open_cache().header().n_vocab);
    }
    lookup::ReplayStats s;
    {
        py::gil_scoped_release nogil;
        std::unique_lock<std::shared_mutex> lock;
        std::shared_lock<std::shared_mutex> repository_lock;
        if (workspace != nullptr) lock = std::unique_lock(workspace->mutex);
        if (repository != nullptr) {
            repository_lock = std::shared_lock(repository->mutex);
            if (!repository->cache) throw std::invalid_argument(repository->path + ": static cache is closed");
        }
        s = lookup::replay(tokens.data(), n, static_cast<size_t>(n_ctx), static_cast<size_t>(n_draft),
                           static_cast<size_t>(max_branches), workspace ? &workspace->cache : nullptr,
                           repository ? repository->cache.get() : nullptr);
    }
    py::dict d;
    d["n_predict"] = s.n_predict;
    d["n_drafted"] = s.n_drafted;
    d["n_accept"] = s.n_accept;
    d["draft_ns"] = s.draft_ns;
    return d;
}

const char* storage_name(lookup::StaticCache::Storage storage) {
    using Storage = lookup::StaticCache::Storage;
    switch (storage) {
        case Storage::memory: return "memory";
        case Storage::stored_copy: return "stored copy";
        case Storage::new_copy: return "new copy";
        case Storage::borrowed: return "borrowed";
        case Storage::none: break;
    }
    return "none";
}

py::dict header_dict(const lookup::StaticHeader& h) {
    py::dict d;
    d["format_version"] = h.format_version;
    d["ngram_order"] = h.ngram_order;
    d["n_vocab"] = h.n_vocab;
    d["fingerprint"] = h.tokenizer_fingerprint;
    d["n_keys"] = h.n_keys;
    d["n_followers"] = h.n_followers;
    d["n_buckets"] = h.n_buckets;
    d["total_count"] = h.total_count;
    d["file_size"] = h.file_size;
    d["checksum"] = h.checksum;
    return d;
}

// Checks the arguments of add/remove, then runs the update without the GIL, under the
// cache's write lock.
template <class Update>
auto update_cache(PyNgramCache& c, const py::object& token_ids, int64_t first, Update&& update) {
    if (first < 0) throw py::value_error("first must be >= 0");
    const TokenArray tokens = as_tokens(token_ids);
    const size_t n = static_cast<size_t>(tokens.size());
    check_tokens(tokens.data(), n, c.n_vocab);
    py::gil_scoped_release nogil;
    std::unique_lock l(c.mutex);
    return update(tokens.data(), n, static_cast<size_t>(first));
}

void bind_ngram_cache(py::module_& m) {
    py::class_<PyNgramCache>(m, "NgramCache")
        .def(py::init<int64_t>(), py::arg("n_vocab"))
        .def_property_readonly("n_vocab", [](const PyNgramCache& c) { return c.n_vocab; })
        .def_property_readonly("n_keys", [](const PyNgramCache& c) { std::shared_lock l(c.mutex); return c.cache.n_keys(); })
        .def_property_readonly("n_followers", [](const PyNgramCache& c) { std::shared_lock l(c.mutex); return c.cache.n_followers(); })
        .def_property_readonly("total_count", [](const PyNgramCache& c) { std::shared_lock l(c.mutex); return c.cache.total_count(); })
        .def_property_readonly("memory_bytes", [](const PyNgramCache& c) { std::shared_lock l(c.mutex); return c.cache.memory_bytes(); })
        .def(
            "add",
            [](PyNgramCache& c, const py::object& token_ids, int64_t first) {
                update_cache(c, token_ids, first, [&](const token_t* t, size_t n, size_t f) { c.cache.add(t, n, f); });
            },
            py::arg("tokens"), py::arg("first") = 0)
        .def(
            "remove",
            [](PyNgramCache& c, const py::object& token_ids, int64_t first) {
                return update_cache(c, token_ids, first,
                                    [&](const token_t* t, size_t n, size_t f) { return c.cache.remove(t, n, f); });
            },
            py::arg("tokens"), py::arg("first") = 0)
        .def(
            "merge",
            [](PyNgramCache& c, PyNgramCache& other) {
                if (other.n_vocab != c.n_vocab) throw py::value_error("caches of different vocabulary sizes");
                py::gil_scoped_release nogil;
                if (&other == &c) {
                    std::unique_lock l(c.mutex);
                    c.cache.merge(c.cache);
                    return;
                }
                std::unique_lock l(c.mutex, std::defer_lock);
                std::shared_lock lo(other.mutex, std::defer_lock);
                std::lock(l, lo);
                c.cache.merge(other.cache);
            },
            py::arg("other"))
        .def("clear", [](PyNgramCache& c) { std::unique_lock l(c.mutex); c.cache.clear(); })
        .def(
            "followers",
            [](const PyNgramCache& c, std::vector<int64_t> key) {
                if (key.empty() || key.size() > static_cast<size_t>(lookup::k_ngram_max)) {
                    throw py::value_error("a key holds 1 to 4 tokens");
                }
                token_t t[lookup::k_ngram_max];
                for (size_t i = 0; i < key.size(); ++i) {
                    if (key[i] < 0 || key[i] >= c.n_vocab) return followers_copy({});
                    t[i] = static_cast<token_t>(key[i]);
                }
                std::shared_lock l(c.mutex);
                return followers_copy(c.cache.find(lookup::make_key(t, static_cast<int>(key.size()))));
            },
            py::arg("key"))
        .def("to_arrays",
             [](const PyNgramCache& c) {
                 std::shared_lock l(c.mutex);
                 CacheArrays arrays;
                 c.cache.for_each([&](lookup::NgramKey k, const lookup::FollowerSpan& s) { arrays.add(k, s); });
                 return arrays.to_numpy();
             })
        .def(
            "save_upstream",
            [](const PyNgramCache& c, const std::string& path) {
                std::string error;
                bool ok;
                {
                    py::gil_scoped_release nogil;
                    std::shared_lock l(c.mutex);
                    ok = lookup::save_upstream(path, c.cache, &error);
                }
                if (!ok) raise_os_error(path, error);
            },
            py::arg("path"))
        .def_static(
            "load_upstream",
            [](const std::string& path, int64_t n_vocab) {
                auto c = std::make_unique<PyNgramCache>(n_vocab);
                std::string error;
                bool ok;
                {
                    py::gil_scoped_release nogil;
                    ok = lookup::load_upstream(path, c->n_vocab, &c->cache, &error);
                }
                if (!ok) throw CacheError(path, error);
                return c;
            },
            py::arg("path"), py::arg("n_vocab"))
        .def("__eq__",
             [](const PyNgramCache& a, const py::object& other) {
                 if (!py::isinstance<PyNgramCache>(other)) return false;
                 const PyNgramCache& b = other.cast<const PyNgramCache&>();
                 if (&a == &b) return true;
                 std::shared_lock la(a.mutex, std::defer_lock);
                 std::shared_lock lb(b.mutex, std::defer_lock);
                 std::lock(la, lb);
                 return a.n_vocab == b.n_vocab && caches_equal(a.cache, b.cache);
             })
        .def("__repr__", [](const PyNgramCache& c) {
            std::shared_lock l(c.mutex);
            return "NgramCache(n_vocab=" + std::to_string(c.n_vocab) + ", keys=" + std::to_string(c.cache.n_keys()) +
                   ", followers=" + std::to_string(c.cache.n_followers()) + ")";
        });
}

void bind_static_cache(py::module_& m) {
    py::class_<PyStaticCache>(m, "StaticCache")
        .def_static(
            "open",
            [](const std::string& path, std::optional<int64_t> n_vocab, std::optional<uint64_t> fingerprint,
               std::optional<std::string> store) {
                auto c = std::make_unique<PyStaticCache>();
                c->path = path;
                std::optional<uint32_t> vocab;
                if (n_vocab) vocab = checked_vocab(*n_vocab);
                std::string error;
                bool ok;
                {
                    py::gil_scoped_release nogil;
                    ok = store ? c->cache->open(path, vocab, fingerprint, *store, &error)
                               : c->cache->open(path, vocab, fingerprint, &error);
                }
                if (!ok) throw CacheError(path, error);
                c->verified.store(c->cache->verified());  // the store's copies are verified already
                return c;
            },
            py::arg("path"), py::arg("n_vocab") = py::none(), py::arg("fingerprint") = py::none(),
            py::kw_only(), py::arg("store") = py::none())
        .def("verify",
             [](PyStaticCache& c) {
                 std::string error;
                 bool ok;
                 {
                     py::gil_scoped_release nogil;
                     std::shared_lock l(c.mutex);
                     if (!c.cache) {
                         ok = false;
                         error = "static cache is closed";
                     } else {
                         ok = c.verified.load() || c.cache->verify(&error);
                     }
                 }
                 if (!ok) throw CacheError(c.path, error);
                 c.verified.store(true);
             })
        .def("close",
             [](PyStaticCache& c) {
                 py::gil_scoped_release nogil;
                 std::unique_lock l(c.mutex);
                 c.cache.reset();
                 c.verified.store(false);
             })
        .def("changed_on_disk",
             [](const PyStaticCache& c) {
                 std::shared_lock l(c.mutex);
                 return c.open_cache().changed_on_disk();
             })
        .def_property_readonly("verified", [](const PyStaticCache& c) { return c.verified.load(); })
        .def_property_readonly("storage",
                               [](const PyStaticCache& c) {
                                   std::shared_lock l(c.mutex);
                                   return storage_name(c.open_cache().storage());
                               })
        .def_property_readonly("store_error",
                               [](const PyStaticCache& c) {
                                   std::shared_lock l(c.mutex);
                                   return c.open_cache().store_error();
                               })
        .def_property_readonly("path", [](const PyStaticCache& c) { return c.path; })
        .def_property_readonly("header",
                               [](const PyStaticCache& c) {
                                   std::shared_lock l(c.mutex);
                                   return header_dict(c.open_cache().header());
                               })
        .def(
            "followers",
            [](const PyStaticCache& c, int64_t t0, int64_t t1) {
                std::shared_lock l(c.mutex);
                const lookup::StaticCache& cache = c.open_cache();
                const int64_t n_vocab = cache.header().n_vocab;
                lookup::FollowerSpan span;
                if (t0 >= 0 && t0 < n_vocab && t1 >= 0 && t1 < n_vocab) {
                    span = cache.find(static_cast<token_t>(t0), static_cast<token_t>(t1)).followers;
                }
                if (span.size == 0) return followers_copy({});
                // A read-only view into the copy, which the view keeps alive past close().
                auto* owner = new std::shared_ptr<lookup::StaticCache>(c.cache);
                py::capsule base(owner, [](void* p) { delete static_cast<std::shared_ptr<lookup::StaticCache>*>(p); });
                py::array_t<token_t> view({static_cast<py::ssize_t>(span.size), py::ssize_t{2}},
                                          {py::ssize_t{sizeof(lookup::Follower)}, py::ssize_t{sizeof(token_t)}},
                                          reinterpret_cast<const token_t*>(span.data), base);
                view.attr("setflags")(py::arg("write") = false);
                return view;
            },
            py::arg("t0"), py::arg("t1"))
        .def("to_arrays",
             [](const PyStaticCache& c) {
                 std::shared_lock l(c.mutex);
                 const lookup::StaticCache& cache = c.verified_cache();
                 CacheArrays arrays;
                 cache.for_each([&](token_t t0, token_t t1, const lookup::FollowerSpan& s) {
                     const token_t pair[2] = {t0, t1};
                     arrays.add(lookup::make_key(pair, 2), s);
                 });
                 return arrays.to_numpy();
             })
        .def(
            "save_upstream",
            [](const PyStaticCache& c, const std::string& path) {
                std::string error;
                bool ok;
                {
                    std::shared_lock l(c.mutex);
                    const lookup::StaticCache& cache = c.verified_cache();
                    py::gil_scoped_release nogil;
                    ok = lookup::save_upstream(path, cache, &error);
                }
                if (!ok) raise_os_error(path, error);
            },
            py::arg("path"))
        .def("__repr__", [](const PyStaticCache& c) {
            std::shared_lock l(c.mutex);
            if (!c.cache) return "StaticCache(" + c.path + ", closed)";
            return "StaticCache(" + c.path + ", keys=" + std::to_string(c.cache->header().n_keys) + ")";
        });
}

void bind_builder(py::module_& m) {
    py::class_<PyStaticCacheBuilder>(m, "StaticCacheBuilder")
        .def(py::init<int64_t>(), py::arg("n_vocab"))
        .def(
            "add",
            [](PyStaticCacheBuilder& b, const py::object& token_ids) {
                const TokenArray tokens = as_tokens(token_ids);
                check_tokens(tokens.data(), static_cast<size_t>(tokens.size()), b.n_vocab);
                py::gil_scoped_release nogil;
                b.builder.add(tokens.data(), static_cast<size_t>(tokens.size()));
            },
            py::arg("tokens"))
        .def(
            "add_cache",
            [](PyStaticCacheBuilder& b, const PyNgramCache& c) {
                if (c.n_vocab != b.n_vocab) throw py::value_error("caches of different vocabulary sizes");
                py::gil_scoped_release nogil;
                std::shared_lock l(c.mutex);
                c.cache.for_each([&](lookup::NgramKey key, const lookup::FollowerSpan& followers) {
                    if (lookup::key_size(key) != lookup::k_static_ngram) return;
                    for (const lookup::Follower& f : followers) {
                        if (f.count == 0) continue;  // a hole of a hashed span
                        b.builder.add_count(lookup::key_token(key, 0), lookup::key_token(key, 1), f.token, f.count);
                    }
                });
            },
            py::arg("cache"))
        .def("add_entries", &add_builder_entries, py::arg("words"), py::arg("counts"))
        .def("take_entries", &take_builder_entries)
        .def_property_readonly("n_tokens", [](const PyStaticCacheBuilder& b) { return b.builder.n_tokens(); })
        .def_property_readonly("memory_bytes", [](const PyStaticCacheBuilder& b) { return b.builder.memory_bytes(); })
        .def(
            "write",
            [](PyStaticCacheBuilder& b, const std::string& path, uint64_t fingerprint) {
                lookup::StaticHeader h{};
                std::string error;
                bool ok;
                {
                    py::gil_scoped_release nogil;
                    ok = b.builder.write(path, fingerprint, &h, &error);
                }
                if (!ok) raise_os_error(path, error);
                return header_dict(h);
            },
            py::arg("path"), py::arg("fingerprint"));
}

// As NgramCache.followers: a key of 1 to 4 tokens; none (no followers) with a token outside
// the vocabulary.
std::optional<lookup::NgramKey> checked_key(const std::vector<int64_t>& key, uint32_t n_vocab) {
    if (key.empty() || key.size() > static_cast<size_t>(lookup::k_ngram_max)) {
        throw py::value_error("a key holds 1 to 4 tokens");
    }
    token_t t[lookup::k_ngram_max];
    for (size_t i = 0; i < key.size(); ++i) {
        if (key[i] < 0 || key[i] >= n_vocab) return std::nullopt;
        t[i] = static_cast<token_t>(key[i]);
    }
    return lookup::make_key(t, static_cast<int>(key.size()));
}

py::dict folder_header_dict(const lookup::FolderTableHeader& h) {
    py::dict d;
    d["format_version"] = h.format_version;
    d["bucket_bits"] = h.bucket_bits;
    d["n_vocab"] = h.n_vocab;
    d["min_count"] = h.min_count;
    d["fingerprint"] = h.fingerprint;
    d["n_keys"] = h.n_keys;
    d["file_size"] = h.file_size;
    return d;
}

void bind_folder_table(py::module_& m) {
    py::class_<PyFolderTable>(m, "FolderTable")
        .def_static(
            "open",
            [](const std::string& path, int64_t n_vocab, uint64_t fingerprint) {
                auto t = std::make_unique<PyFolderTable>();
                t->path = path;
                const uint32_t vocab = checked_vocab(n_vocab);
                std::string error;
                bool ok;
                {
                    py::gil_scoped_release nogil;
                    ok = t->table->open(path, vocab, fingerprint, &error);
                }
                if (!ok) throw CacheError(path, error);
                return t;
            },
            py::arg("path"), py::arg("n_vocab"), py::arg("fingerprint"))
        .def("verify",
             [](const PyFolderTable& t) {
                 std::string error;
                 bool ok;
                 {
                     py::gil_scoped_release nogil;
                     ok = t.table->verify(&error);
                 }
                 if (!ok) throw CacheError(t.path, error);
             })
        .def_property_readonly("path", [](const PyFolderTable& t) { return t.path; })
        .def_property_readonly("header", [](const PyFolderTable& t) { return folder_header_dict(t.table->header()); })
        .def(
            "followers",
            [](const PyFolderTable& t, const std::vector<int64_t>& key) {
                const auto k = checked_key(key, t.table->header().n_vocab);
                std::vector<lookup::Follower> scratch;
                return followers_copy(k ? t.table->find(*k, scratch) : lookup::FollowerSpan{});
            },
            py::arg("key"));

    py::class_<PyWorkspaceView>(m, "WorkspaceView")
        .def(py::init([](const py::object& added, const py::object& removed, const py::object& table) {
                 auto v = std::make_unique<PyWorkspaceView>();
                 v->added_object = added;
                 v->removed_object = removed;
                 v->table_object = table;
                 v->added = &added.cast<PyNgramCache&>();
                 v->n_vocab = v->added->n_vocab;
                 if (!removed.is_none()) v->removed = &removed.cast<PyNgramCache&>();
                 if (!table.is_none()) v->table = &table.cast<PyFolderTable&>();
                 if ((v->removed != nullptr && v->removed->n_vocab != v->n_vocab) ||
                     (v->table != nullptr && v->table->table->header().n_vocab != v->n_vocab)) {
                     throw py::value_error("the workspace layers have different vocabulary sizes");
                 }
                 return v;
             }),
             py::arg("added"), py::arg("removed") = py::none(), py::arg("table") = py::none())
        .def_property_readonly("table", [](const PyWorkspaceView& v) { return v.table_object; })
        .def(
            "followers",
            [](const PyWorkspaceView& v, const std::vector<int64_t>& key) {
                const auto k = checked_key(key, v.n_vocab);
                const LockedSources locked(nullptr, WorkspaceArg{v.added, v.removed, v.table, v.n_vocab}, nullptr);
                return followers_copy(k ? locked.sources.workspace.find(*k) : lookup::FollowerSpan{});
            },
            py::arg("key"));

    m.def(
        "build_folder_table",
        [](const std::vector<py::object>& documents, const std::string& path, int64_t n_vocab, uint64_t fingerprint,
           int64_t memory_limit, int64_t min_count) {
            const uint32_t vocab = checked_vocab(n_vocab);
            if (memory_limit <= 0 || min_count < 1 || min_count > 0xFFFFFFFF) {
                throw py::value_error("memory_limit must be > 0 and min_count >= 1");
            }
            std::vector<TokenArray> arrays;
            std::vector<lookup::TokenView> views;
            arrays.reserve(documents.size());
            for (const py::object& d : documents) {
                arrays.push_back(as_tokens(d));
                check_tokens(arrays.back().data(), static_cast<size_t>(arrays.back().size()), vocab);
                views.push_back({arrays.back().data(), static_cast<size_t>(arrays.back().size())});
            }
            lookup::FolderTableBuild stats;
            std::string error;
            bool ok;
            {
                py::gil_scoped_release nogil;
                ok = lookup::build_folder_table(views, vocab, fingerprint, static_cast<uint32_t>(min_count),
                                                static_cast<size_t>(memory_limit), path, &stats, &error);
            }
            if (!ok) raise_os_error(path, error);
            py::dict d;
            d["n_tokens"] = stats.n_tokens;
            d["n_keys"] = stats.n_keys;
            d["n_keys_seen"] = stats.n_keys_seen;
            d["partitions"] = stats.partitions;
            d["file_size"] = stats.file_size;
            d["peak_bytes"] = stats.peak_bytes;
            return d;
        },
        py::arg("documents"), py::arg("path"), py::arg("n_vocab"), py::arg("fingerprint"), py::kw_only(),
        py::arg("memory_limit"), py::arg("min_count") = 2);
}

}  // namespace

PYBIND11_MODULE(_lookup, m) {
    m.doc() = "Native n-gram lookup core: caches, static cache files, drafting.";
    m.attr("NGRAM_MIN") = lookup::k_ngram_min;
    m.attr("NGRAM_MAX") = lookup::k_ngram_max;
    m.attr("STATIC_NGRAM") = lookup::k_static_ngram;
    m.attr("STATIC_FORMAT_VERSION") = lookup::k_static_format_version;
    m.attr("STATIC_MAGIC") = py::bytes(lookup::k_static_magic, sizeof lookup::k_static_magic);
    py::register_exception<CacheError>(m, "CacheError", PyExc_ValueError);
    // A Python IntEnum: a source compares equal to its id (evidence column 0) and indexes by it.
    py::native_enum<lookup::DraftSource>(m, "DraftSource", "enum.IntEnum", "Which cache decided a drafted token.")
        .value("context", lookup::DraftSource::context)
        .value("workspace", lookup::DraftSource::workspace)
        .value("repository", lookup::DraftSource::repository)
        .finalize();

    bind_ngram_cache(m);
    bind_static_cache(m);
    bind_builder(m);
    bind_folder_table(m);

    m.def("draft", &draft, py::arg("tokens"), py::arg("n_draft"), py::arg("context") = nullptr,
          py::arg("workspace") = py::none(), py::arg("repository") = nullptr);
    m.def("draft_with_evidence", &draft_with_evidence, py::arg("tokens"), py::arg("n_draft"),
          py::arg("context") = nullptr, py::arg("workspace") = py::none(), py::arg("repository") = nullptr);
    m.def("draft_tree", &draft_tree, py::arg("tokens"), py::arg("n_draft"), py::arg("max_branches") = 3,
          py::arg("context") = nullptr, py::arg("workspace") = py::none(), py::arg("repository") = nullptr);
    m.def("replay", &replay, py::arg("tokens"), py::arg("n_ctx"), py::arg("n_draft"), py::arg("workspace") = nullptr,
          py::arg("repository") = nullptr, py::arg("max_branches") = 1);
}
