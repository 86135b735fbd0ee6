package bundle

// GPUCoRunnerFile is the GPU co-runner's report (--gpu-corunner), in each
// bundle it ran beside: one GPUCoRunnerReport, written by
// runbook/gpu_corunner.py.
const GPUCoRunnerFile = "gpu_corunner.json"

// GPUCoRunnerReport is the co-runner's report.
type GPUCoRunnerReport struct {
	TargetShare      float64 `json:"target_share"`
	AchievedShare    float64 `json:"achieved_share"`
	BusyMs           float64 `json:"busy_ms"`
	WallMs           float64 `json:"wall_ms"`
	Matmuls          int     `json:"matmuls"`
	MatmulN          int     `json:"matmul_n"`
	TFLOPS           float64 `json:"tflops"`
	CalibratedTFLOPS float64 `json:"calibrated_tflops"`
	// WorkShare is AchievedShare × TFLOPS / CalibratedTFLOPS: the share of
	// the GPU's matmul work it took (less than the duty cycle where the
	// server's kernels time-slice with its own).
	WorkShare float64 `json:"work_share"`
	Device    string  `json:"device"`
	Torch     string  `json:"torch"`
}
