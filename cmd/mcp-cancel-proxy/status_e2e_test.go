//go:build linux

package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// chromium returns Debian's Chromium, which scripts/test installs; without
// it the test is skipped, except under CI.
func chromium(t *testing.T) string {
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed (scripts/test installs Debian's package)")
		}
		t.Skip("chromium is not installed")
	}
	return path
}

// TestE2EStatusPageInABrowser: the admin listener's status page, loaded in
// a real headless Chromium during a real cancelled call and with another
// call in flight, shows the cancel's story as soon as the cancel is read
// (in progress, told so far), then, once the late answer came, as a timeline (request sent,
// cancel read, forwarded, hook ran, the audit status), the client's run id
// apart from the request id, the call in flight, and the tool's cancel as
// not honoured; never the call's arguments. A screenshot is saved as the
// test's artifact.
func TestE2EStatusPageInABrowser(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	cfg, _ := writeConfig(t, `
policy:
  late_window: 60s # the live story is checked before the late answer comes
  rules:
    - tool: block
      correlate:
        run_id: /_meta/runId
      on_cancel:
        exec: ["true"]
`)
	adminAddr := freePort(t)
	w := startWrapped(t, "--config", cfg, "--admin", adminAddr, "--", proxyBin, "example-server")
	w.initialize(`{}`)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"key":"argument-never-shown"},"_meta":{"progressToken":"p1","runId":"run-9"}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, 1, "p1") })
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"user pressed stop"}}`)
	w.events.waitFor(t, events.CancelAccepted, "id", "1")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.WindowSize(1200, 900))
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(ctx)
	defer cancelTab()
	// The story is there at once, told so far, while the call runs on.
	if err := chromedp.Do(ctx,
		chromedp.Navigate("http://"+adminAddr+"/status"),
		chromedp.WaitVisible(chromedp.CSS(".story.live")),
	); err != nil {
		t.Fatalf("loading the status page in Chromium: %v", err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(".story.live")))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"request 1", "request sent", "cancel read (client)", "cancel forwarded upstream", "in progress: waiting for"} {
		if !strings.Contains(text, want) {
			t.Errorf("the live story does not show %q:\n%s", want, text)
		}
	}

	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{"key":"running"},"_meta":{"progressToken":"p2"}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, 2, "p2") })
	w.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"release","arguments":{"key":"argument-never-shown"}}}`)
	w.recvUntil(isResponse(3)) // the cancelled call answers late: suppressed
	w.logs.waitFor(t, `"id":1,`, `"status":"upstream notified; answered after the cancel`)

	if err := chromedp.Do(ctx,
		chromedp.Navigate("http://"+adminAddr+"/status"),
		chromedp.WaitVisible(chromedp.CSS(".story")),
	); err != nil {
		t.Fatalf("loading the status page in Chromium again: %v", err)
	}
	text, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
	if err != nil {
		t.Fatal(err)
	}
	inFlight, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("inflight")))
	if err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.ArtifactDir(), "status.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	for _, want := range []string{"request 1", "run run-9", "request sent", "cancel read (client)",
		"cancel forwarded upstream", "late answer suppressed", "hook on_cancel ok", "answered after the cancel", "user pressed stop",
		"0 stop seen, 0 quiet (stop not seen), 1 answered anyway"} {
		if !strings.Contains(text, want) {
			t.Errorf("the page does not show %q:\n%s", want, text)
		}
	}
	if !strings.Contains(inFlight, "stdio") || !strings.Contains(inFlight, "\t1\t") {
		t.Errorf("calls in flight: %q, want the session's one", inFlight)
	}
	if strings.Contains(text, "in progress") {
		t.Error("the finished story is still shown as in progress")
	}
	if strings.Contains(text, "argument-never-shown") {
		t.Error("the page shows a call's arguments")
	}
	// The cancel's notification, written to the server, was timed.
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "mcp_cancel_proxy_cancel_notify_seconds_count 1\n") {
		t.Errorf("/metrics: no cancel notification timed:\n%s", metrics)
	}
	w.send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"release","arguments":{"key":"running"}}}`)
	w.recvUntil(isResponse(2))
}
