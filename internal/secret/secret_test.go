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

func TestValuesScrub(t *testing.T) {
	argv := []string{"env", "VLLM_API_KEY=sk-env-1", "vllm", "serve", "m", "--api-key", "sk-flag-2", "--hf-token=hf_3xyz", "-H", "Authorization: Bearer sk-hdr-4", "--port", "8000"}
	got := Values(argv, []string{"OPENAI_API_KEY=sk-env-5", "HOME=/root", "HF_TOKEN=abc"})
	want := []string{"sk-env-1", "sk-flag-2", "hf_3xyz", "Bearer sk-hdr-4", "sk-hdr-4", "sk-env-5"}
	if !slices.Equal(got, want) {
		t.Errorf("Values = %q, want %q", got, want)
	}
	log := "non-default args: {'api_key': ['sk-flag-2'], 'port': 8000}\nkey sk-env-5 and abc stay? abc\n"
	if s := string(Scrub([]byte(log), got)); s != "non-default args: {'api_key': ['"+Hidden+"'], 'port': 8000}\nkey "+Hidden+" and abc stay? abc\n" {
		t.Errorf("Scrub: %q", s)
	}
}
