//go:build unix

package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// generated runs `mcp-cancel-proxy ARGS...` in process and returns its
// stdout, written to a file in a temporary directory.
func generated(t *testing.T, name string, args ...string) (path, text string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), args, io.NopCloser(strings.NewReader("")), outCloser{&stdout}, &stderr); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
	}
	path = filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, stdout.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, stdout.String()
}

// tool returns a program's path, skipping the test without it, except
// under CI (scripts/test installs it).
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed: scripts/test installs it", name)
		}
		t.Skipf("%s is not installed", name)
	}
	return p
}

// allFlags lists every flag of every command, as --name.
func allFlags() (out []string) {
	for _, c := range commands() {
		for _, f := range flagsOf(c) {
			out = append(out, "--"+f.Name)
		}
	}
	return out
}

// TestBashCompletion: the script parses, names every flag, and completes
// as a user would expect: flags, a flag's values, subcommands, the verbs
// of hooks and auth, and after -- the server's own command line.
func TestBashCompletion(t *testing.T) {
	t.Parallel()
	bash := tool(t, "bash")
	path, script := generated(t, "mcp-cancel-proxy.bash", "completion", "bash")
	if out, err := exec.Command(bash, "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v: %s", err, out)
	}
	for _, f := range allFlags() {
		if !strings.Contains(script, f) {
			t.Errorf("the script lacks %s", f)
		}
	}
	for _, c := range []struct{ words, want string }{
		{"mcp-cancel-proxy --log-l", "--log-level"},
		{"mcp-cancel-proxy --log-level ''", "debug info warn error"},
		{"mcp-cancel-proxy --upstream-transport s", "streamable sse"},
		{"mcp-cancel-proxy val", "validate"},
		{"mcp-cancel-proxy hooks ''", "list retry drop"},
		{"mcp-cancel-proxy hooks list --tok", "--token-file"},
		{"mcp-cancel-proxy auth ''", "login list logout"},
		{"mcp-cancel-proxy auth login --key", "--keyring"},
		{"mcp-cancel-proxy auth login --keyring ''", "auto on off"},
		{"mcp-cancel-proxy --oauth s", "start"},
		{"mcp-cancel-proxy validate --s", "--strict"},
		{"mcp-cancel-proxy completion z", "zsh"},
		{"mcp-cancel-proxy --listen 127.0.0.1:1 -- bas", "bash"}, // the server's command: a program
		{"mcp-cancel-proxy -- node --lis", ""},                   // the server's flags are not the proxy's
	} {
		cmd := exec.Command(bash, "-c", `source "$1"; eval "COMP_WORDS=($2)"; COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _mcp_cancel_proxy; `+
			`printf '%s\n' "${COMPREPLY[@]}" | sort -u | tr '\n' ' '`, "bash", path, c.words)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", c.words, err, out)
		}
		if got := strings.TrimSpace(string(out)); !hasWords(got, c.want) || c.want == "" && got != "" {
			t.Errorf("%s<TAB>: %q, want %q", c.words, got, c.want)
		}
	}
}

// hasWords reports whether every word of want is a word of got.
func hasWords(got, want string) bool {
	words := strings.Fields(got)
	for _, w := range strings.Fields(want) {
		found := false
		for _, g := range words {
			found = found || g == w
		}
		if !found {
			return false
		}
	}
	return true
}

// TestZshCompletion: the script parses and names every flag.
func TestZshCompletion(t *testing.T) {
	t.Parallel()
	zsh := tool(t, "zsh")
	path, script := generated(t, "_mcp-cancel-proxy", "completion", "zsh")
	if out, err := exec.Command(zsh, "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v: %s", err, out)
	}
	for _, f := range allFlags() {
		if !strings.Contains(script, "'"+f+"[") {
			t.Errorf("the script lacks %s", f)
		}
	}
}

// TestFishCompletion: the script parses, and fish's own completer
// (complete -C) offers what it should from it.
func TestFishCompletion(t *testing.T) {
	t.Parallel()
	fish := tool(t, "fish")
	path, _ := generated(t, "mcp-cancel-proxy.fish", "completion", "fish")
	if out, err := exec.Command(fish, "--no-execute", path).CombinedOutput(); err != nil {
		t.Fatalf("fish --no-execute: %v: %s", err, out)
	}
	for _, c := range []struct{ line, want string }{
		{"mcp-cancel-proxy --log-l", "--log-level"},
		{"mcp-cancel-proxy --log-level ", "debug"},
		{"mcp-cancel-proxy val", "validate"},
		{"mcp-cancel-proxy hooks ", "retry"},
		{"mcp-cancel-proxy hooks drop --a", "--all"},
		{"mcp-cancel-proxy auth ", "logout"},
		{"mcp-cancel-proxy auth list --j", "--json"},
		{"mcp-cancel-proxy auth login --keyring ", "on"},
		{"mcp-cancel-proxy --listen x -- bas", "bash"},
	} {
		out, err := exec.Command(fish, "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, path, c.line).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", c.line, err, out)
		}
		var got []string
		for _, l := range strings.Split(string(out), "\n") {
			w, _, _ := strings.Cut(l, "\t")
			got = append(got, w)
		}
		if !hasWords(strings.Join(got, " "), c.want) {
			t.Errorf("%s<TAB>: %q, want %q among them", c.line, got, c.want)
		}
	}
}

// TestPowerShellCompletion: generated (no pwsh here to run it), naming
// every flag.
func TestPowerShellCompletion(t *testing.T) {
	t.Parallel()
	_, script := generated(t, "mcp-cancel-proxy.ps1", "completion", "powershell")
	for _, f := range allFlags() {
		if !strings.Contains(script, "'"+f+"'") {
			t.Errorf("the script lacks %s", f)
		}
	}
}

// TestManPage: the manual page renders with man, draws no warning from
// groff, and holds every flag of every command and every command.
func TestManPage(t *testing.T) {
	t.Parallel()
	man := tool(t, "man")
	path, _ := generated(t, "mcp-cancel-proxy.1", "man")
	cmd := exec.Command(man, "-l", path)
	cmd.Env = append(os.Environ(), "MANWIDTH=100", "MANPAGER=cat", "PAGER=cat")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("man -l: %v: %s", err, stderr.String())
	}
	page := string(out)
	if lint, err := exec.Command(tool(t, "groff"), "-man", "-ww", "-z", "-Tutf8", path).CombinedOutput(); err != nil || len(lint) > 0 {
		t.Errorf("groff -ww (every warning): %v: %s", err, lint)
	}
	for _, f := range allFlags() {
		if !strings.Contains(page, f) {
			t.Errorf("the page lacks %s", f)
		}
	}
	for _, c := range commands()[1:] {
		if !strings.Contains(page, c.name) {
			t.Errorf("the page lacks the command %s", c.name)
		}
	}
}
