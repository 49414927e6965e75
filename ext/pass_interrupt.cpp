// PassInterrupt and the address of its callback, which the engine's runtime hands to
// llama_set_abort_callback through llama-cpp-python (this module does not link llama.cpp).
#include "bindings.h"
#include "pass_interrupt.h"

#include <cstdint>

namespace lookup_ext {

void bind_pass_interrupt(py::module_& m) {
    // Held by pybind11 on the heap: its address stays valid for the object's lifetime, which the
    // runtime extends for as long as llama.cpp may read it.
    py::class_<lookup::PassInterrupt>(m, "PassInterrupt",
                                      "Raised from any thread, ends the model pass under way within one graph node.")
        .def(py::init<>())
        .def("raise_", [](lookup::PassInterrupt& p) { p.raised.store(true, std::memory_order_relaxed); })
        .def_property_readonly("raised",
                               [](const lookup::PassInterrupt& p) { return p.raised.load(std::memory_order_relaxed); })
        .def_property_readonly("address", [](lookup::PassInterrupt& p) { return reinterpret_cast<uintptr_t>(&p); });
    m.attr("PASS_INTERRUPT_CALLBACK") = reinterpret_cast<uintptr_t>(&lookup_pass_interrupted);
}

}  // namespace lookup_ext
