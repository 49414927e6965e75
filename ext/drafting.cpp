#include "bindings.h"

#include "replay.h"

#include <algorithm>
#include <mutex>
#include <vector>

namespace lookup_ext {
namespace {

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

// Checks what drafting will read: the static cache must be verified and the last few tokens
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

}  // namespace

void bind_drafting(py::module_& m) {
    m.def("draft", &draft, py::arg("tokens"), py::arg("n_draft"), py::arg("context") = nullptr,
          py::arg("workspace") = py::none(), py::arg("repository") = nullptr);
    m.def("draft_with_evidence", &draft_with_evidence, py::arg("tokens"), py::arg("n_draft"),
          py::arg("context") = nullptr, py::arg("workspace") = py::none(), py::arg("repository") = nullptr);
    m.def("draft_tree", &draft_tree, py::arg("tokens"), py::arg("n_draft"), py::arg("max_branches") = 3,
          py::arg("context") = nullptr, py::arg("workspace") = py::none(), py::arg("repository") = nullptr);
    m.def("replay", &replay, py::arg("tokens"), py::arg("n_ctx"), py::arg("n_draft"), py::arg("workspace") = nullptr,
          py::arg("repository") = nullptr, py::arg("max_branches") = 1);
}

}  // namespace lookup_ext
