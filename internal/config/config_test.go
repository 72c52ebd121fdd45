package config_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
)

// TestExampleIsTheDefaults loads config.example.yaml, which documents every
// key with its default: it must load, and say exactly the defaults.
func TestExampleIsTheDefaults(t *testing.T) {
	got, err := config.Load("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := config.Defaults()
	want.Path = "../../config.example.yaml"
	if !reflect.DeepEqual(got, want) {
		t.Errorf("config.example.yaml = %+v, want the defaults %+v", got, want)
	}
}

func TestParse(t *testing.T) {
	cfg, err := config.Parse("f.yaml", strings.NewReader("limits:\n  max_frame_size: 2 MB\nchild:\n  term_after: 250ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Limits.MaxFrameSize != 2_000_000 || cfg.Child.TermAfter != 250*time.Millisecond || cfg.Child.KillAfter != 5*time.Second {
		t.Errorf("Parse = %+v", cfg)
	}
	if _, err := config.Parse("empty.yaml", strings.NewReader("")); err != nil {
		t.Errorf("empty file: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string // every one must appear in the error
	}{
		{"unknown key", "log:\n  levle: debug\n", []string{"f.yaml:2:3: ", "levle"}},
		{"wrong type", "child:\n  term_after: soon\n", []string{"f.yaml:2:15: ", "soon"}},
		{"bad size", "limits:\n  max_frame_size: 12 parsecs\n", []string{"f.yaml:2:19: limits.max_frame_size: invalid size"}},
		{"bad upstream transport", "http:\n  upstream_transport: websocket\n", []string{"f.yaml:2:3: http.upstream_transport: \"websocket\" is not auto, streamable or sse"}},
		{"bad oauth mode", "http:\n  oauth:\n    mode: password\n", []string{"f.yaml:3:5: http.oauth.mode: \"password\" is not auto, start, client_credentials or off"}},
		{"client credentials without a client", "http:\n  oauth:\n    mode: client_credentials\n", []string{"f.yaml:3:5: http.oauth.mode: client_credentials needs client_id, and client_secret_file or client_key_file"}},
		{"a client key without client credentials", "http:\n  oauth:\n    client_key_file: k.pem\n", []string{"f.yaml:3:5: http.oauth.client_key_file: only with mode client_credentials"}},
		{"bad keyring", "http:\n  oauth:\n    keyring: maybe\n", []string{"f.yaml:3:5: http.oauth.keyring: \"maybe\" is not auto, on or off"}},
		{"bad trusted proxy", "http:\n  trusted_proxies: [10.0.0.0/8, ingress]\n", []string{"http.trusted_proxies[1]: \"ingress\" is neither an IP address nor a CIDR prefix"}},
		{"no connections", "http:\n  max_connections: 0\n", []string{"http.max_connections: must be positive"}},
		{"no idle time", "http:\n  upstream_idle: 0s\n", []string{"http.upstream_idle: must be positive"}},
		{"policy, every problem at once with its place", `policy:
  defaults:
    timeout: -1s
  rules:
    - tool: "a["
      max_concurrent: -2
    - method: "x"
      tool: "y"
      capture: {job: "no/slash"}
      on_cancel: {}
      on_late_result: {http: {url: "ftp://x"}, retries: 500}
    - timeout: 1m
      escalate: reboot
  late_window: 0s
`, []string{"f.yaml:3:5: policy.defaults.timeout: must not be negative", "f.yaml:5:7: policy.rules[0].tool", "f.yaml:6:7: policy.rules[0].max_concurrent",
			"f.yaml:7:7: policy.rules[1]: a rule has tool or method", "f.yaml:9:17: policy.rules[1].capture.job", "f.yaml:10:7: policy.rules[1].on_cancel: a hook needs exec or http",
			"f.yaml:11:31: policy.rules[1].on_late_result.http.url", "f.yaml:11:48: policy.rules[1].on_late_result.retries", "f.yaml:12:7: policy.rules[2]: a rule needs tool or method",
			"f.yaml:13:7: policy.rules[2].escalate", "f.yaml:14:3: policy.late_window"}},
		{"policy unknown key", "policy:\n  rules:\n    - tool: x\n      timout: 1m\n", []string{"f.yaml:4:7: ", "timout"}},
		{"every problem at once", "log:\n  level: loud\n  format: xml\nledger:\n  retire_max: -1\n",
			[]string{"log.level", "log.format", "ledger.retire_max"}},
		{"tiny frames", "limits:\n  max_frame_size: 10\n", []string{"limits.max_frame_size"}},
		{"tracing", "tracing:\n  endpoint: collector:4318\n  protocol: zipkin\n", []string{
			`f.yaml:2:3: tracing.endpoint: "collector:4318" is not an http:// or https:// URL with a host`,
			`f.yaml:3:3: tracing.protocol: "zipkin" is not one of http/protobuf, grpc`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("f.yaml", strings.NewReader(tt.yaml))
			if err == nil {
				t.Fatalf("Parse(%q) = nil error", tt.yaml)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse(%q) = %q, want it to mention %q", tt.yaml, err, w)
				}
			}
		})
	}
}

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]config.ByteSize{"1024": 1024, "64MiB": 64 << 20, "4 KiB": 4096, "1GB": 1e9, "7B": 7} {
		if got, err := config.ParseByteSize(in); err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5MiB", "MiB", "99999999999GiB"} {
		if _, err := config.ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) = nil error", in)
		}
	}
}

// FuzzParseConfig: whatever the bytes, Parse returns a valid config or an
// error, and never panics.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("log:\n  level: debug\nlimits:\n  max_frame_size: 1MiB\n"))
	f.Add([]byte("child: {term_after: 1s, kill_after: 2s}\nledger: {retire_after: 1m, retire_max: 3}"))
	f.Add([]byte("- a\n- b"))
	f.Add([]byte("policy:\n  defaults: {timeout: 1m}\n  rules:\n    - tool: \"db_*\"\n      max_concurrent: 2\n      capture: {job: [/a, /b]}\n      on_cancel: {exec: [x], retries: 2}\n    - method: resources/read\n      on_late_result: {http: {url: \"http://127.0.0.1:1/x\"}}\naudit: {path: off}\n"))
	f.Add([]byte("policy:\n  defaults: {client_timeout: auto}\n  rules:\n    - tool: x\n      client_timeout: 5m\n      timeout: 1m\n  client_timeouts:\n    grace: 10s\n    clients:\n      - {name: a, from: \"1.2\", until: \"2\", waits: 1m, source: s}\n      - {name: b, cancels: true}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := config.Parse("fuzz.yaml", strings.NewReader(string(data)))
		if err == nil {
			if verr := cfg.Validate(); verr != nil {
				t.Fatalf("Parse accepted an invalid config: %v", verr)
			}
		}
	})
}
