package cuda

// Regenerate the BPF object and its Go bindings (needs clang and
// libbpf-dev's headers; the outputs are committed so builds need neither).
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go@v0.22.0 -target bpfel -type ckey -type cval -type open_call -type sevent -output-stem cuda_bpf cuda bpf/cuda.bpf.c -- -O2 -g -Wall -Werror
