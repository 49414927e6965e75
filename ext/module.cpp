// lookahead_lsp._lookup: its constants, its error and the DraftSource enum here; each bound type
// in a file of its own (bindings.h).
#include "bindings.h"

#include <pybind11/native_enum.h>

PYBIND11_MODULE(_lookup, m) {
    m.doc() = "Native n-gram lookup core: caches, static cache files, drafting.";
    m.attr("NGRAM_MIN") = lookup::k_ngram_min;
    m.attr("NGRAM_MAX") = lookup::k_ngram_max;
    m.attr("STATIC_NGRAM") = lookup::k_static_ngram;
    m.attr("STATIC_FORMAT_VERSION") = lookup::k_static_format_version;
    m.attr("STATIC_MAGIC") = py::bytes(lookup::k_static_magic, sizeof lookup::k_static_magic);
    py::register_exception<lookup_ext::CacheError>(m, "CacheError", PyExc_ValueError);
    // A Python IntEnum: a source compares equal to its id (evidence column 0) and indexes by it.
    py::native_enum<lookup::DraftSource>(m, "DraftSource", "enum.IntEnum", "Which cache decided a drafted token.")
        .value("context", lookup::DraftSource::context)
        .value("workspace", lookup::DraftSource::workspace)
        .value("repository", lookup::DraftSource::repository)
        .finalize();

    lookup_ext::bind_ngram_cache(m);
    lookup_ext::bind_static_cache(m);
    lookup_ext::bind_builder(m);
    lookup_ext::bind_folder_table(m);
    lookup_ext::bind_drafting(m);
    lookup_ext::bind_pass_interrupt(m);
    lookup_ext::bind_vocabulary_texts(m);
    lookup_ext::bind_text_windows(m);
}
