//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// npmTarball names scripts/npm-pack's tarballs: the main package, or a
// platform's (group 1 the platform, as Node names it).
var npmTarball = regexp.MustCompile(`^mcp-cancel-proxy-(?:([a-z0-9]+-[a-z0-9]+)-)?\d[^/]*\.tgz$`)

// npmProject installs the npm packages that scripts/npm-pack made (in the
// folder MCP_NPM_PACKAGES names) into a new project, as a user's npm would
// from the registry: every platform's package is offered, and npm must
// pick this machine's by its os and cpu fields. It returns the project and
// the environment to run npm in (Node 22 first on PATH).
func npmProject(t *testing.T) (proj string, env []string) {
	t.Helper()
	node, _ := nodePeers(t)
	main, platforms := npmPackages(t)
	// overrides stand in for the registry: each platform package the main
	// one lists resolves to its tarball.
	overrides := map[string]string{}
	for name, path := range platforms {
		overrides[name] = "file:" + path
	}
	manifest, _ := json.Marshal(map[string]any{"private": true,
		"dependencies": map[string]string{"mcp-cancel-proxy": "file:" + main}, "overrides": overrides})
	proj = t.TempDir()
	if err := os.WriteFile(filepath.Join(proj, "package.json"), manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	env = append(os.Environ(), "PATH="+filepath.Dir(node)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"npm_config_update_notifier=false")
	npm(t, proj, env, "install", "--offline", "--no-audit", "--no-fund")

	installed, err := os.ReadDir(filepath.Join(proj, "node_modules", "@mcp-cancel-proxy"))
	if err != nil {
		t.Fatal(err)
	}
	if want := nodeArch(); len(installed) != 1 || installed[0].Name() != "linux-"+want {
		var names []string
		for _, e := range installed {
			names = append(names, e.Name())
		}
		t.Fatalf("npm installed the platform packages %q, want just linux-%s", names, want)
	}
	return proj, env
}

// npmPackages returns the tarballs scripts/npm-pack made (in the folder
// MCP_NPM_PACKAGES names): the main package's, and each platform
// package's by its name (@mcp-cancel-proxy/linux-x64). Without them it
// skips, or fails under CI.
func npmPackages(t *testing.T) (main string, platforms map[string]string) {
	t.Helper()
	dir := os.Getenv("MCP_NPM_PACKAGES")
	if dir == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("MCP_NPM_PACKAGES is not set; scripts/test packs the npm packages")
		}
		t.Skip("MCP_NPM_PACKAGES is not set (scripts/npm-pack makes the packages; scripts/test runs this)")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	platforms = map[string]string{}
	for _, e := range entries {
		switch m := npmTarball.FindStringSubmatch(e.Name()); {
		case m == nil:
		case m[1] == "":
			main = filepath.Join(dir, e.Name())
		default:
			platforms["@mcp-cancel-proxy/"+m[1]] = filepath.Join(dir, e.Name())
		}
	}
	if main == "" || len(platforms) < 2 {
		t.Fatalf("%s holds no main package or fewer than two platforms' packages", dir)
	}
	return main, platforms
}

// nodeArch is this machine's architecture as Node names it.
func nodeArch() string {
	if runtime.GOARCH == "amd64" {
		return "x64"
	}
	return runtime.GOARCH
}

func npm(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("npm", args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("npm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestE2ENpmPackage: what a client configuration that says
// `"command": "npx", "args": ["-y", "mcp-cancel-proxy", "--", ...]` runs.
// npx runs the launcher, which runs this platform's binary with the same
// stdio, passes SIGTERM on, and exits as the binary did.
func TestE2ENpmPackage(t *testing.T) {
	t.Parallel()
	proj, env := npmProject(t)
	launcher := filepath.Join(proj, "node_modules", ".bin", "mcp-cancel-proxy")

	t.Run("demo", func(t *testing.T) {
		cmd := exec.Command("npx", "-y", "mcp-cancel-proxy", "demo")
		cmd.Dir, cmd.Env = proj, env
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "cancels forwarded 2") {
			t.Fatalf("npx mcp-cancel-proxy demo: %v\n%s", err, out)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		// The server's stdin is recorded on its way in: what it received.
		rec := filepath.Join(t.TempDir(), "server-stdin")
		cmd := exec.Command("npx", append([]string{"-y", "mcp-cancel-proxy"}, withEvents(t, []string{"--log-level", "debug", "--",
			"sh", "-c", `tee "$0" | exec "$@"`, rec, proxyBin, "example-server"})...)...)
		cmd.Dir, cmd.Env = proj, env
		w := startCommand(t, cmd)
		w.initialize(`{}`)
		w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{"key":"k"},"_meta":{"progressToken":"tok"}}}`)
		w.recvUntil(func(m map[string]any) bool { return concerns(m, "none", "tok") })
		w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"test"}}`)
		w.events.waitFor(t, events.CancelAccepted, "id", "2")
		w.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"release","arguments":{"key":"k"}}}`)
		got := w.recvUntil(isResponse(3))
		w.events.waitFor(t, events.Suppressed, "kind", "response", "id", "2")
		w.send(`{"jsonrpc":"2.0","id":4,"method":"ping"}`)
		assertNothingAfter(t, append(got, w.recvUntil(isResponse(4))...), 2, "tok")
		w.stdin.Close()
		if code := w.wait(); code != 0 {
			t.Errorf("npx exit status %d after client EOF, want 0", code)
		}
		seen, err := os.ReadFile(rec)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(seen), `"method":"notifications/cancelled","params":{"requestId":2`) {
			t.Errorf("the server never received the cancel; it received:\n%s", seen)
		}
	})

	t.Run("SIGTERM", func(t *testing.T) {
		cmd := exec.Command(launcher, withEvents(t, []string{"--log-level", "debug", "--", proxyBin, "example-server"})...)
		cmd.Env = env
		w := startCommand(t, cmd)
		w.initialize(`{}`)
		started := w.events.waitFor(t, events.ServerStarted)
		pid, _ := started["pid"].(float64)
		if pid == 0 {
			t.Fatalf("no pid in %v", started)
		}
		bin := childOf(t, w.cmd.Process.Pid)
		if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := w.wait(); code != 0 {
			t.Errorf("launcher exit status %d after SIGTERM, want the proxy's 0", code)
		}
		w.events.waitFor(t, events.ServerStopping, "why", "terminated")
		for _, pid := range []int{bin, int(pid)} {
			if survives(pid) {
				t.Errorf("process %d outlived the launcher", pid)
			}
		}
	})

	t.Run("binary killed", func(t *testing.T) {
		cmd := exec.Command(launcher, "--", proxyBin, "example-server")
		cmd.Env = env
		w := startCommand(t, cmd)
		w.initialize(`{}`)
		if err := syscall.Kill(childOf(t, w.cmd.Process.Pid), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		w.wait()
		if ws, ok := w.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Errorf("launcher ended with %v, want killed by SIGKILL as its binary was", w.cmd.ProcessState)
		}
	})

	t.Run("platforms", func(t *testing.T) {
		// The launcher looks for the packages the main package depends on.
		var pkg struct{ OptionalDependencies map[string]string }
		b, err := os.ReadFile(filepath.Join(proj, "node_modules", "mcp-cancel-proxy", "package.json"))
		if err == nil {
			err = json.Unmarshal(b, &pkg)
		}
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("node", "-e", `for (const p of require(process.argv[1]).platforms) console.log("@mcp-cancel-proxy/" + p)`,
			filepath.Join(proj, "node_modules", "mcp-cancel-proxy", "bin", "mcp-cancel-proxy.js"))
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		known := strings.Fields(string(out))
		for _, p := range known {
			if _, ok := pkg.OptionalDependencies[p]; !ok && os.Getenv("CI") != "" {
				t.Errorf("the launcher knows %s, which the main package does not depend on", p)
			}
			delete(pkg.OptionalDependencies, p)
		}
		if len(pkg.OptionalDependencies) > 0 {
			t.Errorf("the main package depends on %v, which the launcher does not know", pkg.OptionalDependencies)
		}
	})

	t.Run("exit status", func(t *testing.T) {
		cmd := exec.Command(launcher, "--", "sh", "-c", "exit 7")
		cmd.Env = env
		// The client stays connected: a server that exits then fails.
		stdin, client, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		cmd.Stdin = stdin
		err = cmd.Run()
		stdin.Close()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
			t.Errorf("launcher ended with %v, want exit status 7 (the server's, through the proxy)", err)
		}
	})
}

// childOf returns the pid of the one child of a process (the binary the
// launcher runs).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var kids []string
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		kids = append(kids, strings.Fields(string(b))...)
	}
	if len(kids) != 1 {
		t.Fatalf("process %d has children %q, want one", pid, kids)
	}
	var child int
	fmt.Sscan(kids[0], &child)
	return child
}
