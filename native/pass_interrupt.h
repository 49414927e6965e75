// A request, raised from any thread, to end the model pass under way. llama.cpp's CPU backend
// asks its abort callback after each node of the graph, from the pass's first worker thread, so
// a raised interrupt ends the pass within one node rather than at its end: a request that
// preempts work done ahead no longer waits for that work's pass (up to a prompt pass's 200 ms).
#pragma once

#include <atomic>

namespace lookup {

struct PassInterrupt {
    std::atomic<bool> raised{false};
};

}  // namespace lookup

// llama.cpp's ggml_abort_callback, with a PassInterrupt as its data: a plain function, so that
// the pass's worker asks it without Python (and its lock) in between.
extern "C" bool lookup_pass_interrupted(void* interrupt);
