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
	if want := config.Defaults(); !reflect.DeepEqual(got, want) {
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
		{"unknown key", "log:\n  levle: debug\n", []string{"f.yaml", "line 2", "levle"}},
		{"wrong type", "child:\n  term_after: soon\n", []string{"f.yaml", "line 2"}},
		{"bad size", "limits:\n  max_frame_size: 12 parsecs\n", []string{"line 2", "invalid size"}},
		{"every problem at once", "log:\n  level: loud\n  format: xml\nledger:\n  retire_max: -1\n",
			[]string{"log.level", "log.format", "ledger.retire_max"}},
		{"tiny frames", "limits:\n  max_frame_size: 10\n", []string{"limits.max_frame_size"}},
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
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := config.Parse("fuzz.yaml", strings.NewReader(string(data)))
		if err == nil {
			if verr := cfg.Validate(); verr != nil {
				t.Fatalf("Parse accepted an invalid config: %v", verr)
			}
		}
	})
}
