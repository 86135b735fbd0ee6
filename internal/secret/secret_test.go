package secret

import (
	"slices"
	"testing"
)

func TestArgs(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"vllm", "serve", "m", "--api-key", "sk-1", "--max-num-batched-tokens", "8192", "--tokenizer", "t"},
			[]string{"vllm", "serve", "m", "--api-key", Hidden, "--max-num-batched-tokens", "8192", "--tokenizer", "t"}},
		{[]string{"python", "-m", "sglang.launch_server", "--api-key=sk-2", "--hf-token", "hf_x", "--port", "30000"},
			[]string{"python", "-m", "sglang.launch_server", "--api-key=" + Hidden, "--hf-token", Hidden, "--port", "30000"}},
		{[]string{"env", "VLLM_API_KEY=sk-3", "HF_TOKEN=hf_y", "CUDA_VISIBLE_DEVICES=0", "python", "s.py"},
			[]string{"env", "VLLM_API_KEY=" + Hidden, "HF_TOKEN=" + Hidden, "CUDA_VISIBLE_DEVICES=0", "python", "s.py"}},
		{[]string{"curl", "-H", "Authorization: Bearer sk-4", "-H", "X-Route: a", "http://h:8000/v1/models"},
			[]string{"curl", "-H", "Authorization: " + Hidden, "-H", "X-Route: a", "http://h:8000/v1/models"}},
		{[]string{"client.py", "--password"}, []string{"client.py", "--password"}},
	} {
		in := slices.Clone(tc.in)
		if got := Args(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Args(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("Args changed its input: %q", tc.in)
		}
	}
}

func TestName(t *testing.T) {
	for n, want := range map[string]bool{
		"VLLM_API_KEY": true, "OPENAI_API_KEY": true, "HF_TOKEN": true, "--access-token": true, "DB_PASSWORD": true,
		"Authorization": true, "x-apikey": true, "AWS_SECRET_ACCESS_KEY": true,
		"--max-num-batched-tokens": false, "TOKENIZERS_PARALLELISM": false, "--tokenizer": false, "--keyphrase": false,
		"VLLM_KEY_CACHE": false, "CUDA_VISIBLE_DEVICES": false, "--author": false,
	} {
		if Name(n) != want {
			t.Errorf("Name(%q) = %v, want %v", n, !want, want)
		}
	}
}
