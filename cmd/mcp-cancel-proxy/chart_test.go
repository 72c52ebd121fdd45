//go:build unix

package main

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/natstest"
)

// k8sObject is what TestChartOutputRuns reads of a rendered manifest.
type k8sObject struct {
	Kind     string
	Metadata struct{ Name string }
	Data     map[string]string
	Spec     struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Name string
					Args []string
					Env  []struct{ Name string }
				}
			}
		}
	}
}

// renderedSidecar is the ConfigMap's config.yaml and the proxy container's
// arguments and environment variables of a manifest the chart rendered.
func renderedSidecar(t *testing.T, path string) (config string, args, env []string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch o.Kind {
		case "ConfigMap":
			config = o.Data["config.yaml"]
		case "Deployment":
			for _, c := range o.Spec.Template.Spec.Containers {
				if c.Name == "mcp-cancel-proxy" {
					args = c.Args
					for _, e := range c.Env {
						env = append(env, e.Name)
					}
				}
			}
		}
	}
	if config == "" || args == nil {
		t.Fatalf("%s: no ConfigMap config.yaml or no mcp-cancel-proxy container", path)
	}
	return config, args, env
}

// TestChartOutputRuns runs what the Helm chart renders (deploy/*.yaml, its
// output for the ci/ values; scripts/check-chart keeps them current) as a
// pod would: the proxy container's own arguments and the ConfigMap's
// file, only the addresses made local (the pod's 0.0.0.0 ports, the server
// container's upstream, NATS) and the hook store a temporary folder. It
// is ready, relays a call, keeps /status behind the admin token from the
// Secret's variable, and reloads a new policy written as the kubelet
// writes a ConfigMap's update (a new folder, the ..data link swapped).
func TestChartOutputRuns(t *testing.T) {
	t.Parallel()
	for _, manifest := range []string{"kubernetes.yaml", "kubernetes-fleet.yaml"} {
		t.Run(manifest, func(t *testing.T) {
			t.Parallel()
			config, args, env := renderedSidecar(t, filepath.Join("../../deploy", manifest))
			dir := t.TempDir()
			config = strings.ReplaceAll(config, "/var/lib/mcp-cancel-proxy", dir)
			if strings.Contains(config, "nats:") {
				ns := natstest.Run(t, -1)
				config = replaceLine(t, config, "nats:", "  nats: "+ns.ClientURL())
			}
			mount := kubeletMount(t, config)
			up, front, admin := freePort(t), freePort(t), freePort(t)
			startServer(t, exec.Command(proxyBin, "example-server", "--http", up))
			for i, a := range args {
				switch {
				case strings.HasPrefix(a, "--config="):
					args[i] = "--config=" + filepath.Join(mount, "config.yaml")
				case strings.HasPrefix(a, "--listen="):
					args[i] = "--listen=" + front
				case strings.HasPrefix(a, "--admin="):
					args[i] = "--admin=" + admin
				case strings.HasPrefix(a, "--upstream="):
					args[i] = "--upstream=http://" + up + "/mcp"
				}
			}
			cmd := exec.Command(proxyBin, args...)
			cmd.Env = os.Environ()
			for _, name := range env {
				cmd.Env = append(cmd.Env, name+"=chart-test-token")
			}
			sc := startCommand(t, cmd)
			t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
			waitListening(t, up)
			sc.events.waitFor(t, events.SidecarListening)
			sc.events.waitFor(t, events.AdminListening)
			for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/status": 401} {
				if got := httpStatus(t, "http://"+admin+path, ""); got != want {
					t.Errorf("GET %s: %d, want %d", path, got, want)
				}
			}
			if got := httpStatus(t, "http://"+admin+"/status", "chart-test-token"); got != 200 {
				t.Errorf("GET /status with the admin token: %d, want 200", got)
			}
			resp := mcpPost(t, "http://"+front+"/mcp", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"chart","version":"1"}}}`)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(body), "mcp-cancel-proxy-example") {
				t.Fatalf("initialize through the rendered sidecar: %d %s", resp.StatusCode, body)
			}
			kubeletUpdate(t, mount, withRule(t, config, map[string]any{"tool": "chart_reload_probe", "timeout": "1s"}))
			sc.events.waitFor(t, events.PolicyReloaded)
		})
	}
}

// withRule is config with one more policy rule.
func withRule(t *testing.T, config string, rule map[string]any) string {
	t.Helper()
	var c map[string]any
	if err := yaml.Unmarshal([]byte(config), &c); err != nil {
		t.Fatal(err)
	}
	p, _ := c["policy"].(map[string]any)
	if p == nil {
		p = map[string]any{}
		c["policy"] = p
	}
	rules, _ := p["rules"].([]any)
	p["rules"] = append(rules, rule)
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// replaceLine replaces the line of text holding key with line.
func replaceLine(t *testing.T, text, key, line string) string {
	t.Helper()
	var out strings.Builder
	found := false
	for l := range strings.Lines(text) {
		if strings.Contains(l, key) {
			l, found = line+"\n", true
		}
		out.WriteString(l)
	}
	if !found {
		t.Fatalf("no %q in the configuration", key)
	}
	return out.String()
}

// kubeletMount lays out a ConfigMap volume as the kubelet does: the file
// is a link through ..data, a link to a folder named for the update.
func kubeletMount(t *testing.T, config string) string {
	t.Helper()
	mount := t.TempDir()
	kubeletUpdate(t, mount, config)
	if err := os.Symlink(filepath.Join("..data", "config.yaml"), filepath.Join(mount, "config.yaml")); err != nil {
		t.Fatal(err)
	}
	return mount
}

// kubeletUpdate writes config as the kubelet writes a ConfigMap's update:
// a new folder, and ..data swapped to it in one rename.
func kubeletUpdate(t *testing.T, mount, config string) {
	t.Helper()
	version, err := os.MkdirTemp(mount, "..update_")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(version, "config.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(mount, "..data_tmp")
	if err := os.Symlink(filepath.Base(version), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(mount, "..data")); err != nil {
		t.Fatal(err)
	}
}

// httpStatus GETs url, with a bearer token if one is given.
func httpStatus(t *testing.T, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
