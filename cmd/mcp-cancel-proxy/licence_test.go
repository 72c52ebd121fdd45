package main

import (
	"os"
	"strings"
	"testing"
)

// TestLicenceShipped: the licence is Apache-2.0, and says so wherever a
// user gets the proxy: the container image's OCI labels (with its source
// and version), and the npm package (scripts/test checks every release
// archive and every packed npm package).
func TestLicenceShipped(t *testing.T) {
	t.Parallel()
	licence, err := os.ReadFile("../../LICENSE")
	if err != nil || !strings.Contains(string(licence), "Apache License") || !strings.Contains(string(licence), "Version 2.0, January 2004") {
		t.Fatalf("LICENSE is not the Apache License 2.0 (%v)", err)
	}
	docker, _ := os.ReadFile("../../Dockerfile")
	for _, label := range []string{`org.opencontainers.image.licenses="Apache-2.0"`, `org.opencontainers.image.source=`,
		`org.opencontainers.image.version="$VERSION"`, "COPY LICENSE "} {
		if !strings.Contains(string(docker), label) {
			t.Errorf("Dockerfile lacks %s", label)
		}
	}
	pkg, _ := os.ReadFile("../../npm/mcp-cancel-proxy/package.json")
	if !strings.Contains(string(pkg), `"license": "Apache-2.0"`) || !strings.Contains(string(pkg), `"LICENSE"`) {
		t.Errorf("npm/mcp-cancel-proxy/package.json: no license field or LICENSE file:\n%s", pkg)
	}
}
