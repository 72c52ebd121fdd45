package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// rootsProbeEnv makes this test binary print how many CA roots it trusts
// and exit (see TestMain).
const rootsProbeEnv = "MCP_TEST_ROOTS"

// TestFallbackRoots: with no system CA bundle at all (SSL_CERT_FILE and
// SSL_CERT_DIR naming nothing, as in the scratch image), the binary still
// trusts the public CA roots it carries (it trusted none: every https://
// upstream, collector and webhook failed with "certificate signed by
// unknown authority").
func TestFallbackRoots(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), rootsProbeEnv+"=1", "SSL_CERT_FILE=/nonexistent/ca.pem", "SSL_CERT_DIR=/nonexistent")
	out, err := cmd.Output()
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || n < 50 {
		t.Fatalf("roots trusted without a system bundle: %q (%v), want the fallback's (over 100)", out, err)
	}
}
