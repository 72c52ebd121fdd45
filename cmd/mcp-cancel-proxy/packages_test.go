package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// releaseDist returns the release scripts/release built for scripts/test
// (MCP_RELEASE_DIST), its version, and the SHA256SUMS in it by file name.
func releaseDist(t *testing.T) (dist, version string, sums map[string]string) {
	t.Helper()
	dist = os.Getenv("MCP_RELEASE_DIST")
	if dist == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("MCP_RELEASE_DIST is not set; scripts/test builds the release")
		}
		t.Skip("MCP_RELEASE_DIST is not set (scripts/release builds the release; scripts/test runs this)")
	}
	f, err := os.Open(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums = map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		sums[name] = sum
		if v, _, ok := strings.Cut(strings.TrimPrefix(name, "mcp-cancel-proxy_"), "_"); ok {
			version = v
		}
	}
	return dist, version, sums
}

// checkArchive fails unless url names the release's archive for target
// (os_arch, ext its kind) and sum is that archive's in SHA256SUMS.
func checkArchive(t *testing.T, sums map[string]string, version, target, ext, url, sum string) {
	t.Helper()
	want := "mcp-cancel-proxy_" + version + "_" + target + ext
	if path.Base(url) != want {
		t.Errorf("%s: url %s, want the archive %s", target, url, want)
	}
	if sums[want] == "" || !strings.EqualFold(sum, sums[want]) {
		t.Errorf("%s: sum %s, SHA256SUMS says %s", target, sum, sums[want])
	}
}

// TestPackageManifests: the Homebrew formula, the Scoop manifest and the
// winget manifests that scripts/release wrote name, for each platform,
// the release's own archive and its sum from SHA256SUMS, and the
// release's version.
func TestPackageManifests(t *testing.T) {
	dist, version, sums := releaseDist(t)
	t.Run("homebrew", func(t *testing.T) {
		rb, err := os.ReadFile(filepath.Join(dist, "homebrew", "mcp-cancel-proxy.rb"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(rb), `version "`+version+`"`) {
			t.Errorf("the formula does not say version %q", version)
		}
		pairs := regexp.MustCompile(`url "([^"]+)"\s+sha256 "([0-9a-f]{64})"`).FindAllStringSubmatch(string(rb), -1)
		targets := []string{"darwin_arm64", "darwin_amd64", "linux_arm64", "linux_amd64"}
		if len(pairs) != len(targets) {
			t.Fatalf("%d url and sha256 pairs, want %d", len(pairs), len(targets))
		}
		for i, p := range pairs {
			checkArchive(t, sums, version, targets[i], ".tar.gz", p[1], p[2])
		}
	})
	t.Run("scoop", func(t *testing.T) {
		var m struct {
			Version      string
			Bin          string
			Architecture map[string]struct {
				URL, Hash  string
				ExtractDir string `json:"extract_dir"`
			}
		}
		data, err := os.ReadFile(filepath.Join(dist, "scoop", "mcp-cancel-proxy.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		if m.Version != version || m.Bin != "mcp-cancel-proxy.exe" {
			t.Errorf("version %q, bin %q", m.Version, m.Bin)
		}
		for arch, target := range map[string]string{"64bit": "windows_amd64", "arm64": "windows_arm64"} {
			a := m.Architecture[arch]
			checkArchive(t, sums, version, target, ".zip", a.URL, a.Hash)
			if a.ExtractDir != strings.TrimSuffix(path.Base(a.URL), ".zip") {
				t.Errorf("%s: extract_dir %q", arch, a.ExtractDir)
			}
		}
	})
	t.Run("winget", func(t *testing.T) {
		dir := filepath.Join(dist, "winget", "manifests", "m", "McpCancelProxy", "McpCancelProxy", version)
		for _, kind := range []string{"", ".installer", ".locale.en-US"} {
			var m struct {
				PackageIdentifier string `yaml:"PackageIdentifier"`
				PackageVersion    string `yaml:"PackageVersion"`
				ManifestVersion   string `yaml:"ManifestVersion"`
				Installers        []struct {
					Architecture         string `yaml:"Architecture"`
					InstallerURL         string `yaml:"InstallerUrl"`
					InstallerSha256      string `yaml:"InstallerSha256"`
					NestedInstallerFiles []struct {
						RelativeFilePath string `yaml:"RelativeFilePath"`
					} `yaml:"NestedInstallerFiles"`
				} `yaml:"Installers"`
			}
			data, err := os.ReadFile(filepath.Join(dir, "McpCancelProxy.McpCancelProxy"+kind+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(data, &m); err != nil {
				t.Fatal(err)
			}
			if m.PackageIdentifier != "McpCancelProxy.McpCancelProxy" || m.PackageVersion != version || m.ManifestVersion != "1.6.0" {
				t.Errorf("manifest%s: %q %q %q", kind, m.PackageIdentifier, m.PackageVersion, m.ManifestVersion)
			}
			if kind != ".installer" {
				continue
			}
			archs := map[string]string{"x64": "windows_amd64", "arm64": "windows_arm64"}
			if len(m.Installers) != len(archs) {
				t.Fatalf("%d installers, want %d", len(m.Installers), len(archs))
			}
			for _, in := range m.Installers {
				target := archs[in.Architecture]
				checkArchive(t, sums, version, target, ".zip", in.InstallerURL, in.InstallerSha256)
				if in.InstallerSha256 != strings.ToUpper(in.InstallerSha256) {
					t.Errorf("%s: winget wants the sum in capitals", target)
				}
				if len(in.NestedInstallerFiles) != 1 || in.NestedInstallerFiles[0].RelativeFilePath != "mcp-cancel-proxy_"+version+"_"+target+`\mcp-cancel-proxy.exe` {
					t.Errorf("%s: nested files %+v", target, in.NestedInstallerFiles)
				}
			}
		}
	})
}
