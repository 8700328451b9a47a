// Conditional graph nodes (issue 35; CUDA 12.4+, IF/ELSE and SWITCH 12.8+): one graph of a
// kernel that reads the launch's inputs and sets three conditions on the device
// (cudaGraphSetConditional with handles from cudaGraphConditionalHandleCreate), followed by
// four conditional nodes added with cudaGraphAddNode(cudaGraphNodeTypeConditional):
//   IF/ELSE  x > 10: the THEN body writes 2x, the ELSE body -x;
//   WHILE    counter > 0: the body adds the counter to a sum, counts the iteration, decrements
//            the counter and sets the condition to counter > 0 again;
//   SWITCH   on sel (3 bodies, each writes 100 + 11 * its index; sel >= 3 runs none);
//   IF       on a handle whose default value 1 is assigned at every launch
//            (cudaGraphCondAssignDefault) and that no kernel sets: its body counts launches.
// Instantiated once and launched 4 times with different inputs (uploaded with cudaMemcpy
// before each launch); the results, copied back, are checked against a CPU model. A client must
// carry the conditional nodes, their body graphs and the device-side condition updates. Prints
// node counts and checked values only. Shared cudart. Exits 1 if any value differs.
#include <vector>

#include "check.h"

#if CUDART_VERSION >= 12080
#define HAVE_SWITCH 1
#else
#define HAVE_SWITCH 0
#endif

struct In {
    int x, counter, sel;
};
struct Out {
    int res_if;   // THEN: 2x, ELSE: -x, no body: -999
    int sum;      // WHILE: counter + (counter-1) + ... + 1
    int iters;    // WHILE: iterations
    int res_sw;   // SWITCH: 100 + 11 * sel, or -1
    int runs;     // default-value IF: launches so far (never reset)
    int counter;  // WHILE's counter when it ended
};

__global__ void setter(const In* in, Out* out, cudaGraphConditionalHandle h_if, cudaGraphConditionalHandle h_while,
                       cudaGraphConditionalHandle h_switch) {
    out->res_if = -999;
    out->sum = 0;
    out->iters = 0;
    out->res_sw = -1;
    out->counter = in->counter;
    cudaGraphSetConditional(h_if, in->x > 10 ? 1u : 0u);
    cudaGraphSetConditional(h_while, in->counter > 0 ? 1u : 0u);
#if HAVE_SWITCH
    cudaGraphSetConditional(h_switch, (unsigned)in->sel);
#else
    (void)h_switch;
#endif
}
__global__ void then_body(const In* in, Out* out) { out->res_if = 2 * in->x; }
__global__ void else_body(const In* in, Out* out) { out->res_if = -in->x; }
__global__ void while_body(Out* out, cudaGraphConditionalHandle h_while) {
    out->sum += out->counter;
    out->iters += 1;
    out->counter -= 1;
    cudaGraphSetConditional(h_while, out->counter > 0 ? 1u : 0u);
}
__global__ void switch_body(Out* out, int index) { out->res_sw = 100 + 11 * index; }
__global__ void count_run(Out* out) { out->runs += 1; }

static cudaGraphNode_t add_kernel(cudaGraph_t g, void* func, void** args) {
    cudaKernelNodeParams kp = {};
    kp.func = func;
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(1);
    kp.kernelParams = args;
    cudaGraphNode_t nd;
    CK(cudaGraphAddKernelNode(&nd, g, nullptr, 0, &kp));
    return nd;
}
// Adds a conditional node after `dep`; returns its body graphs (CUDA-owned).
static cudaGraph_t* add_conditional(cudaGraph_t g, cudaGraphNode_t dep, cudaGraphConditionalHandle h,
                                    cudaGraphConditionalNodeType type, unsigned size) {
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeConditional;
    p.conditional.handle = h;
    p.conditional.type = type;
    p.conditional.size = size;
    cudaGraphNode_t nd;
    CK(cudaGraphAddNode(&nd, g, &dep, nullptr, 1, &p));
    return p.conditional.phGraph_out;
}

static int count_nodes(cudaGraph_t g) {
    size_t n = 0;
    CK(cudaGraphGetNodes(g, nullptr, &n));
    return (int)n;
}

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    CK(cudaSetDevice(0));
    printf("switch nodes and if/else compiled in: %s\n", HAVE_SWITCH ? "yes" : "no");
    In* in;
    Out* out;
    CK(cudaMalloc(&in, sizeof(In)));
    CK(cudaMalloc(&out, sizeof(Out)));
    CK(cudaMemset(out, 0, sizeof(Out)));
    CK(cudaDeviceSynchronize());  // the graph runs on a non-blocking stream

    cudaGraph_t g;
    CK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h_if, h_while, h_switch, h_default;
    CK(cudaGraphConditionalHandleCreate(&h_if, g, 0, 0));
    CK(cudaGraphConditionalHandleCreate(&h_while, g, 0, 0));
    CK(cudaGraphConditionalHandleCreate(&h_switch, g, 0, 0));
    CK(cudaGraphConditionalHandleCreate(&h_default, g, 1, cudaGraphCondAssignDefault));

    void* set_args[] = {&in, &out, &h_if, &h_while, &h_switch};
    cudaGraphNode_t set_node = add_kernel(g, (void*)setter, set_args);

    // IF / ELSE.
    void* io_args[] = {&in, &out};
#if HAVE_SWITCH
    cudaGraph_t* if_bodies = add_conditional(g, set_node, h_if, cudaGraphCondTypeIf, 2);
    add_kernel(if_bodies[0], (void*)then_body, io_args);
    add_kernel(if_bodies[1], (void*)else_body, io_args);
#else
    cudaGraph_t* if_bodies = add_conditional(g, set_node, h_if, cudaGraphCondTypeIf, 1);
    add_kernel(if_bodies[0], (void*)then_body, io_args);
#endif
    // WHILE.
    cudaGraph_t* while_bodies = add_conditional(g, set_node, h_while, cudaGraphCondTypeWhile, 1);
    void* while_args[] = {&out, &h_while};
    add_kernel(while_bodies[0], (void*)while_body, while_args);
    // SWITCH.
#if HAVE_SWITCH
    cudaGraph_t* switch_bodies = add_conditional(g, set_node, h_switch, cudaGraphCondTypeSwitch, 3);
    int index[3] = {0, 1, 2};
    void* sw_args[3][2] = {{&out, &index[0]}, {&out, &index[1]}, {&out, &index[2]}};
    for (int i = 0; i < 3; ++i) add_kernel(switch_bodies[i], (void*)switch_body, sw_args[i]);
#endif
    // IF on a default-assigned handle.
    cudaGraph_t* default_bodies = add_conditional(g, set_node, h_default, cudaGraphCondTypeIf, 1);
    void* run_args[] = {&out};
    add_kernel(default_bodies[0], (void*)count_run, run_args);

    int want_nodes = HAVE_SWITCH ? 5 : 4;
    int nodes = count_nodes(g);
    printf("graph nodes: %d (a kernel and %d conditional nodes) %s\n", nodes, want_nodes - 1,
           nodes == want_nodes ? "ok" : "WRONG");
    printf("body graphs' nodes: if %d, while %d, default-if %d\n", count_nodes(if_bodies[0]),
           count_nodes(while_bodies[0]), count_nodes(default_bodies[0]));
    int bad = nodes != want_nodes;

    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const In inputs[4] = {{20, 5, 0}, {3, 0, 2}, {11, 1, 1}, {-4, 9, 5}};
    for (int k = 0; k < 4; ++k) {
        const In& x = inputs[k];
        // Ordered on s: a cudaMemcpy from pageable memory may return before its DMA has ended.
        CK(cudaMemcpyAsync(in, &x, sizeof x, cudaMemcpyHostToDevice, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaStreamSynchronize(s));
        Out o;
        CK(cudaMemcpy(&o, out, sizeof o, cudaMemcpyDeviceToHost));
        Out w;
        w.res_if = x.x > 10 ? 2 * x.x : (HAVE_SWITCH ? -x.x : -999);
        w.iters = x.counter > 0 ? x.counter : 0;
        w.sum = x.counter > 0 ? x.counter * (x.counter + 1) / 2 : 0;
        w.counter = x.counter > 0 ? 0 : x.counter;
        w.res_sw = HAVE_SWITCH && x.sel >= 0 && x.sel < 3 ? 100 + 11 * x.sel : -1;
        w.runs = k + 1;
        bool ok = o.res_if == w.res_if && o.sum == w.sum && o.iters == w.iters && o.counter == w.counter &&
                  o.res_sw == w.res_sw && o.runs == w.runs;
        printf("launch %d: x=%d counter=%d sel=%d -> if/else %d, while %d iterations sum %d counter %d, switch %d, "
               "default-if runs %d: %s\n",
               k + 1, x.x, x.counter, x.sel, o.res_if, o.iters, o.sum, o.counter, o.res_sw, o.runs,
               ok ? "ok" : "WRONG");
        if (!ok)
            fprintf(stderr, "launch %d expected: if/else %d, while %d sum %d counter %d, switch %d, runs %d\n", k + 1,
                    w.res_if, w.iters, w.sum, w.counter, w.res_sw, w.runs);
        bad += !ok;
    }

    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(s));
    CK(cudaFree(out));
    CK(cudaFree(in));
    printf("conditional: %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}
