//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// recipes is where docs/recipes.md's files are.
const recipes = "../../deploy/recipes"

// npmTarballs returns the main package's and this machine's platform
// package's tarballs of scripts/npm-pack, and the platform package's name.
func npmTarballs(t *testing.T) (main, platform, name string) {
	t.Helper()
	main, platforms := npmPackages(t)
	name = "@mcp-cancel-proxy/linux-" + nodeArch()
	if platform = platforms[name]; platform == "" {
		t.Fatalf("no %s among the npm packages", name)
	}
	return main, platform, name
}

// workflow is what TestRecipeWorkflow reads of a GitHub Actions workflow.
type workflow struct {
	Env  map[string]string
	Jobs map[string]struct {
		Steps []struct{ Name, Uses, Run string }
	}
}

// TestRecipeWorkflow runs the run steps of the recipe's GitHub Actions
// workflow as the runner would (bash -e, the workflow's env), in an empty
// checkout, with the proxy's npm packages of this build in place of the
// registry's and the example server as the server: both checks pass. With
// a server command that cannot start, the first check's step fails.
// (actionlint checks the file itself: scripts/check-recipes.)
func TestRecipeWorkflow(t *testing.T) {
	t.Parallel()
	node, _ := nodePeers(t)
	main, platform, _ := npmTarballs(t)
	raw, err := os.ReadFile(filepath.Join(recipes, "github-actions.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var w workflow
	if err := yaml.Unmarshal(raw, &w); err != nil {
		t.Fatal(err)
	}
	global := t.TempDir()
	env := os.Environ()
	for k, v := range w.Env {
		env = append(env, k+"="+v)
	}
	env = append(env, "MCP_CANCEL_PROXY="+main+" "+platform, "npm_config_prefix="+global, "npm_config_offline=true",
		"npm_config_update_notifier=false", "TOOL=slow_ignore", `TOOL_ARGS={"seconds":20,"steps":40}`,
		"CHECK_FLAGS=--runs 1 --cancel-after 300ms --watch 1s",
		"PATH="+filepath.Join(global, "bin")+string(os.PathListSeparator)+filepath.Dir(node)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var last string // the last step's output
	run := func(server string) (string, error) {
		checkout := t.TempDir()
		var log strings.Builder
		for _, s := range w.Jobs["check"].Steps {
			if s.Run == "" {
				continue // checkout, setup-node: the empty folder, Node 22 on PATH
			}
			cmd := exec.Command("bash", "-e", "-c", s.Run)
			cmd.Dir, cmd.Env = checkout, append(env, "SERVER_COMMAND="+server)
			out, err := cmd.CombinedOutput()
			last = string(out)
			log.WriteString("== " + s.Name + "\n" + last)
			if err != nil {
				return s.Name, err
			}
		}
		t.Logf("%s", log.String())
		return "", nil
	}
	if step, err := run(proxyBin + " example-server"); err != nil {
		t.Fatalf("step %q: %v", step, err)
	}
	if !strings.Contains(last, "ok   progress-after-cancel") || strings.Contains(last, "FAIL ") {
		t.Errorf("behind the proxy, slow_ignore's check still fails a line:\n%s", last)
	}
	step, err := run(filepath.Join(t.TempDir(), "no-such-server"))
	if err == nil || !strings.Contains(step, "report card") {
		t.Fatalf("with a server that cannot start: step %q ended with %v, want the report card's step to fail", step, err)
	}
}

// TestRecipeNpmPackage packs the recipe's npm package (its dist/index.js a
// stand-in server that runs the example server), installs it with the
// proxy's packages of this build, and checks the server through its bin:
// slow_ignore ignores the cancel and goes on reporting progress (bare, its
// cancel and progress-after-cancel lines fail: TestE2ECheckKnownServers);
// the proxy in front keeps all of it from the client.
func TestRecipeNpmPackage(t *testing.T) {
	t.Parallel()
	node, _ := nodePeers(t)
	main, platform, name := npmTarballs(t)
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS(filepath.Join(recipes, "npm"))); err != nil {
		t.Fatal(err)
	}
	stand := `require('node:child_process').spawn(` + jsString(proxyBin) + `, ['example-server'], {stdio: 'inherit'})` +
		`.on('exit', (code) => process.exit(code ?? 1));` + "\n"
	if err := os.MkdirAll(filepath.Join(src, "dist"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "dist", "index.js"), []byte(stand), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+filepath.Dir(node)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"npm_config_update_notifier=false")
	npm(t, src, env, "pkg", "set", "dependencies.mcp-cancel-proxy=file:"+main)
	dest := t.TempDir()
	packed := filepath.Join(dest, strings.TrimSpace(npm(t, src, env, "pack", "--silent", "--pack-destination", dest)))
	proj := t.TempDir()
	manifest, _ := json.Marshal(map[string]any{"private": true,
		"dependencies": map[string]string{"@your-org/your-server": "file:" + packed},
		"overrides":    map[string]string{"mcp-cancel-proxy": "file:" + main, name: "file:" + platform}})
	if err := os.WriteFile(filepath.Join(proj, "package.json"), manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	npm(t, proj, env, "install", "--offline", "--no-audit", "--no-fund")
	bin := filepath.Join(proj, "node_modules", ".bin", "your-server")
	got, code, out := runCheck(t, env, "--tool", "slow_ignore", "--args", `{"seconds":20,"steps":40}`, "--", bin)
	compareChecks(t, got, map[string]string{"cancel": "pass", "late-answer": "pass", "progress-after-cancel": "pass", "cancel-unknown": "pass"}, code, 0, out)
}

// jsString quotes s for JavaScript source.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestRecipeRegistryEntry: the registry entry of the recipes names one
// server everywhere the registry looks for proof of it (the npm package's
// mcpName, the image's label), names the npm package the recipe makes,
// and follows the official registry's rules the schema does not hold (an
// MCPB URL naming mcp, with its SHA-256; images on a registry it takes).
// scripts/check-recipes validates it against the registry's schema.
func TestRecipeRegistryEntry(t *testing.T) {
	var entry struct {
		Name, Version string
		Packages      []struct {
			RegistryType, Identifier, Version, FileSha256 string
			Transport                                     struct{ Type string }
		}
	}
	readJSON(t, filepath.Join(recipes, "server.json"), &entry)
	var pkg struct{ Name, Version, McpName string }
	readJSON(t, filepath.Join(recipes, "npm", "package.json"), &pkg)
	if pkg.McpName != entry.Name {
		t.Errorf("package.json mcpName %q, server.json name %q", pkg.McpName, entry.Name)
	}
	docker, err := os.ReadFile(filepath.Join(recipes, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(docker), `LABEL io.modelcontextprotocol.server.name="`+entry.Name+`"`) {
		t.Errorf("the Dockerfile recipe labels no image as %q", entry.Name)
	}
	kinds := map[string]bool{}
	for _, p := range entry.Packages {
		kinds[p.RegistryType] = true
		if p.Transport.Type != "stdio" {
			t.Errorf("%s: transport %q, want stdio (the proxy wraps a stdio server)", p.RegistryType, p.Transport.Type)
		}
		switch p.RegistryType {
		case "npm":
			if p.Identifier != pkg.Name || p.Version != pkg.Version || p.Version != entry.Version {
				t.Errorf("npm %s@%s, the recipe's package is %s@%s, the entry %s", p.Identifier, p.Version, pkg.Name, pkg.Version, entry.Version)
			}
		case "oci":
			if !regexp.MustCompile(`^(docker\.io|ghcr\.io|quay\.io|mcr\.microsoft\.com|[a-z0-9-]+\.pkg\.dev|[a-z0-9]+\.azurecr\.io)/[^:]+:` + regexp.QuoteMeta(entry.Version) + `$`).MatchString(p.Identifier) {
				t.Errorf("oci %q: not registry/namespace/repository:%s on a registry the official one takes", p.Identifier, entry.Version)
			}
		case "mcpb":
			if !strings.Contains(p.Identifier, "mcp") || !strings.HasPrefix(p.Identifier, "https://github.com/") ||
				!regexp.MustCompile(`^[a-f0-9]{64}$`).MatchString(p.FileSha256) {
				t.Errorf("mcpb %q (sha256 %q): the registry wants a GitHub release URL naming mcp, with the file's SHA-256", p.Identifier, p.FileSha256)
			}
		default:
			t.Errorf("a package of type %q, which no recipe makes", p.RegistryType)
		}
	}
	if len(kinds) != 3 {
		t.Errorf("packages %v, want the three the recipes make: npm, oci, mcpb", kinds)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
