package bundle

// CUDAFile holds the cuda probe's counts of CUDA driver calls: one
// CUDARecord per thread, function and pass.
const CUDAFile = "cuda.jsonl"

// CUDARecord is one line of cuda.jsonl: the calls of one function by one
// thread over one period.
type CUDARecord struct {
	Level   string  `json:"level"`
	Repeat  int     `json:"repeat"`
	Warmup  bool    `json:"warmup"`
	PID     int     `json:"pid"`
	TID     int     `json:"tid"`
	Name    string  `json:"name"`
	Symbol  string  `json:"symbol"`
	Calls   uint64  `json:"calls"`
	PerSec  float64 `json:"per_s"`
	WallSec float64 `json:"wall_s"`
}
