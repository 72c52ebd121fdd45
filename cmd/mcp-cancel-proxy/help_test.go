package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHelpOnStdout: --help, -h and help print the full usage on stdout and
// exit 0, for the proxy and for every subcommand, with the flags spelled
// --name; a bad flag says so on stderr and exits 2.
func TestHelpOnStdout(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "--listen address"},
		{[]string{"-h"}, "--upstream URL"},
		{[]string{"help"}, "--config file"},
		{[]string{"--log-level", "debug", "--help"}, "--admin address"},
		{[]string{"validate", "--help"}, "usage: mcp-cancel-proxy validate [--strict] [--explain] FILE"},
		{[]string{"hooks", "--help"}, "list|retry|drop"},
		{[]string{"hooks", "list", "--help"}, "--token-file"},
		{[]string{"demo", "-h"}, "--server"},
		{[]string{"example-server", "--help"}, "--stateless"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), c.args, io.NopCloser(strings.NewReader("")), outCloser{&stdout}, &stderr)
		if code != 0 || !strings.Contains(stdout.String(), c.want) || stderr.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %.80q, stderr %q; want 0, %q on stdout, nothing on stderr", c.args, code, stdout.String(), stderr.String(), c.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"--no-such-flag"}, io.NopCloser(strings.NewReader("")), outCloser{&stdout}, &stderr); code != exitUsage ||
		!strings.Contains(stderr.String(), "no-such-flag") || stdout.Len() != 0 {
		t.Errorf("a bad flag: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

// TestCommandLineMistakes: a misspelt subcommand that is no program gets
// "did you mean"; a program is still the server command; a flag's
// duration without a unit says so, in the file's words.
func TestCommandLineMistakes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"valdate", "x.yaml"}, "did you mean validate?"},
		{[]string{"hoks", "list"}, "did you mean hooks?"},
		{[]string{"--term-after", "5", "--", "true"}, `"5": a duration needs a unit, such as 5s`},
		{[]string{"--cancel-grace", "soon", "--", "true"}, `"soon" is not a duration such as 500ms, 30s or 5m`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), c.args, io.NopCloser(strings.NewReader("")), outCloser{&stdout}, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr.String(), exitUsage, c.want)
		}
	}
	if got := nearSubcommand("true"); got != "" { // a program on PATH: the server command
		t.Errorf("nearSubcommand(true) = %q", got)
	}
}

// outCloser is a stdout for run that does nothing on Close.
type outCloser struct{ io.Writer }

func (outCloser) Close() error { return nil }

// TestNoFlagsNoHeading: a usage whose command has no flags ends without a
// "flags:" heading over nothing (issue 39, item 7).
func TestNoFlagsNoHeading(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	printUsage(&b, "usage: x\n\nflags:\n", flag.NewFlagSet("x", flag.ContinueOnError))
	if got := b.String(); got != "usage: x\n" {
		t.Errorf("usage %q, want no flags heading", got)
	}
}

// TestCancelGraceZero: --cancel-grace 0 overrides the configuration
// file's grace (a 0 flag is not "unset"), and the file's 0 stays 0.
func TestCancelGraceZero(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte("http:\n  cancel_grace: 2s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "z.yaml")
	if err := os.WriteFile(zero, []byte("http:\n  cancel_grace: 0s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"--config", cfg, "--cancel-grace", "0", "--", "true"}, 0},
		{[]string{"--config", cfg, "--cancel-grace", "0s", "--", "true"}, 0},
		{[]string{"--config", cfg, "--cancel-grace", "50ms", "--", "true"}, 50 * time.Millisecond},
		{[]string{"--config", cfg, "--", "true"}, 2 * time.Second},
		{[]string{"--config", zero, "--", "true"}, 0},
		{[]string{"--", "true"}, 500 * time.Millisecond},
	} {
		got, _, err := parseWrapArgs(tc.args, io.Discard, io.Discard)
		if err != nil || got.HTTP.CancelGrace != tc.want {
			t.Errorf("%q: cancel_grace %v (%v), want %v", tc.args, got.HTTP.CancelGrace, err, tc.want)
		}
	}
}
