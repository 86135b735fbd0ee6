package runbook

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asrprof/asrprof/internal/filesum"
	"github.com/asrprof/asrprof/internal/secret"
)

// DefaultProvenanceEnv names the environment variables recorded with every
// run because they change results. A trailing * matches a prefix.
var DefaultProvenanceEnv = []string{
	"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
	"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM",
	"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "TORCHINDUCTOR_*", "TORCH_COMPILE_*",
	"VLLM_*", "SGLANG_*", "NCCL_*", "FLASHINFER_*",
	"HF_HOME", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "TRANSFORMERS_OFFLINE",
	"VIRTUAL_ENV", "PYTHONPATH",
}

// Provenance is what a run's numbers depend on besides the server's code.
type Provenance struct {
	Command    string      `json:"command"`
	Argv       []string    `json:"argv"`
	Executable *Executable `json:"executable,omitempty"`
	// Python is set when the command runs Python (directly or through a
	// #! script).
	Python *PythonInfo `json:"python,omitempty"`
	// Env holds the variables named by the provenance list that are set.
	Env map[string]string `json:"env"`
	// CUDAVisibleDevices is the server's CUDA_VISIBLE_DEVICES; nil: unset.
	CUDAVisibleDevices *string `json:"cuda_visible_devices"`
	// CPUs is the server's CPU affinity (sched_getaffinity), e.g. "0-55,112-167".
	CPUs string `json:"cpus,omitempty"`
	// GPUs as NVML saw them before the server started (absent without NVML).
	GPUs   []GPU        `json:"gpus,omitempty"`
	Caches []CacheState `json:"caches,omitempty"`
	Notes  []string     `json:"notes,omitempty"`
}

// Executable identifies the program the command's first word runs.
type Executable struct {
	Path string `json:"path"`
	// Resolved is Path with symlinks followed, when it differs (a
	// virtual environment's python is a link to the system's).
	Resolved string    `json:"resolved,omitempty"`
	Size     int64     `json:"size"`
	ModTime  time.Time `json:"mtime"`
	SHA256   string    `json:"sha256"`
	// Interpreter is the program of a #! line, when there is one.
	Interpreter string `json:"interpreter,omitempty"`
}

// PythonInfo is the interpreter a Python server runs under.
type PythonInfo struct {
	Path    string `json:"path"`
	Version string `json:"version"`
	Prefix  string `json:"prefix"` // sys.prefix: shows the virtual environment
}

// CacheState is a compile cache directory before a run: empty or missing
// means a cold start.
type CacheState struct {
	Dir    string    `json:"dir"`
	Exists bool      `json:"exists"`
	Files  int       `json:"files"`
	Bytes  int64     `json:"bytes"`
	Newest time.Time `json:"newest_mtime,omitzero"`
}

// setGPUs records the GPUs as read before the server started, and why
// they could not be read.
func (p *Provenance) setGPUs(g []GPU, err error) {
	p.GPUs = g
	if err != nil {
		p.Notes = append(p.Notes, "gpus: "+err.Error())
	}
}

// SelectEnv returns the entries of env (KEY=VALUE) whose key matches one of
// names (exact, or a prefix when the name ends with *).
func SelectEnv(env, names []string) map[string]string {
	out := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if ok && slices.ContainsFunc(names, func(n string) bool {
			p, star := strings.CutSuffix(n, "*")
			return (star && strings.HasPrefix(k, p)) || (!star && k == n)
		}) {
			out[k] = secret.Env(k, v)
		}
	}
	return out
}

// envValue returns the value of key in env and whether it is set.
func envValue(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// Describe records the command's static provenance before it runs: the
// executable, Python, the environment subset and the cache states.
// Whatever cannot be read becomes a note, never an error.
func Describe(ctx context.Context, command string, argv, env, envNames, cacheDirs []string) *Provenance {
	env, prog := envCommand(argv, env)
	shown := ServerCmd{Command: command, Argv: argv}.Shown()
	p := &Provenance{Command: shown.Command, Argv: shown.Argv, Env: SelectEnv(env, envNames)}
	if v, ok := envValue(env, "CUDA_VISIBLE_DEVICES"); ok {
		p.CUDAVisibleDevices = &v
	}
	if prog != "" {
		exe, err := describeExecutable(prog, env)
		if err != nil {
			p.Notes = append(p.Notes, "executable: "+err.Error())
		} else {
			p.Executable = exe
			if py := pythonOf(exe); py != "" {
				info, err := pythonInfo(ctx, py, env)
				if err != nil {
					p.Notes = append(p.Notes, "python: "+err.Error())
				} else {
					p.Python = info
				}
			}
		}
	}
	for _, d := range cacheDirs {
		p.Caches = append(p.Caches, cacheState(d))
	}
	return p
}

// envCommand reads an `env [-i] [-u NAME] [-C DIR] [NAME=VALUE]... prog`
// prefix of argv: the environment the program sees (env, changed by the
// prefix) and the word naming the program (prog; argv[0] without such a
// prefix).
func envCommand(argv, env []string) ([]string, string) {
	if len(argv) == 0 {
		return env, ""
	}
	if filepath.Base(argv[0]) != "env" {
		return env, argv[0]
	}
	out := append([]string(nil), env...)
	drop := func(name string) {
		out = slices.DeleteFunc(out, func(kv string) bool {
			k, _, _ := strings.Cut(kv, "=")
			return k == name
		})
	}
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "-i" || a == "--ignore-environment" || a == "-":
			out = out[:0]
		case (a == "-u" || a == "--unset") && i+1 < len(argv):
			i++
			drop(argv[i])
		case a == "-C" || a == "--chdir":
			i++
		case strings.HasPrefix(a, "-"):
		case strings.Contains(a, "="):
			k, _, _ := strings.Cut(a, "=")
			drop(k)
			out = append(out, a)
		default:
			return out, a
		}
	}
	return out, argv[0]
}

// lookPath finds prog the way exec would, in env's PATH.
func lookPath(prog string, env []string) (string, error) {
	if strings.Contains(prog, "/") {
		return filepath.Abs(prog)
	}
	path, _ := envValue(env, "PATH")
	for _, dir := range filepath.SplitList(path) {
		cand := filepath.Join(cmp.Or(dir, "."), prog)
		if st, err := os.Stat(cand); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return filepath.Abs(cand)
		}
	}
	return "", fmt.Errorf("%s: %w", prog, exec.ErrNotFound)
}

func describeExecutable(prog string, env []string) (*Executable, error) {
	path, err := lookPath(prog, env)
	if err != nil {
		return nil, err
	}
	sum, st, head, err := filesum.SHA256(path, 256)
	if err != nil {
		return nil, err
	}
	exe := &Executable{Path: path, Size: st.Size(), ModTime: st.ModTime().UTC(), Interpreter: shebang(head), SHA256: hex.EncodeToString(sum)}
	if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
		exe.Resolved = real
	}
	return exe, nil
}

// shebang returns the interpreter of a #! line ("#!/usr/bin/env python3"
// gives "python3"), "" when there is none.
func shebang(head []byte) string {
	s := string(head)
	if !strings.HasPrefix(s, "#!") {
		return ""
	}
	line, _, _ := strings.Cut(s[2:], "\n")
	f := strings.Fields(line)
	if len(f) == 0 {
		return ""
	}
	if filepath.Base(f[0]) == "env" {
		for _, a := range f[1:] {
			if !strings.HasPrefix(a, "-") {
				return a
			}
		}
		return ""
	}
	return f[0]
}

var pythonName = regexp.MustCompile(`^python[0-9.]*$`)

// pythonOf returns the Python interpreter an executable runs under: itself
// when it is named python*, its #! interpreter when that is, else "".
func pythonOf(exe *Executable) string {
	for _, p := range []string{exe.Path, exe.Interpreter} {
		if pythonName.MatchString(filepath.Base(p)) { // "" has the base "."
			return p
		}
	}
	return ""
}

func pythonInfo(ctx context.Context, py string, env []string) (*PythonInfo, error) {
	path, err := lookPath(py, env)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-c", "import platform, sys; print(platform.python_version()); print(sys.prefix)")
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s -c ...: %w", path, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	info := &PythonInfo{Path: path, Version: strings.TrimSpace(lines[0])}
	if len(lines) > 1 {
		info.Prefix = strings.TrimSpace(lines[1])
	}
	return info, nil
}

// cacheState sums a directory tree: file count, bytes and newest mtime.
func cacheState(dir string) CacheState {
	cs := CacheState{Dir: dir}
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return cs
	}
	cs.Exists = true
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		cs.Files++
		cs.Bytes += info.Size()
		if mt := info.ModTime().UTC(); mt.After(cs.Newest) {
			cs.Newest = mt
		}
		return nil
	})
	return cs
}

// CPUList formats CPU numbers as ranges: [0 1 2 5] gives "0-2,5".
func CPUList(cpus []int) string {
	cpus = slices.Sorted(slices.Values(cpus))
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
