package httpx

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/mcpheader"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// codeHeaderMismatch is 2026-07-28's HeaderMismatch: a request's metadata
// headers are missing, malformed, or disagree with its body.
const codeHeaderMismatch = -32020

// Where the sidecar is the 2026-07-28 server its client sees (in front of
// a stdio server or an HTTP+SSE server, which never see the headers), it
// makes the check a server makes: the request metadata headers
// (MCP-Protocol-Version, Mcp-Method, Mcp-Name, and a tools/call's
// Mcp-Param-* as the server's tools/list answers annotate its tools) must
// agree with the body. In
// front of a Streamable HTTP server, the headers go on as they came and the
// server judges them.

// refuseMismatch answers a 2026-07-28 request whose metadata headers
// disagree with its body with 400 and HeaderMismatch, and reports whether
// it did. Notifications, batches and the earlier revisions' requests are
// not checked: the revision defines no headers for them.
func refuseMismatch(ctx *fasthttp.RequestCtx, f *framing.Frame, tools *mcpheader.Tools) bool {
	version := upstream.Peek(ctx.Request.Header.All(), upstream.VersionHeader)
	m := &f.Msgs[0]
	// A 2026-07-28 body under an earlier revision's header is checked too:
	// the header disagrees with it.
	if f.Batch || m.Kind != framing.KindRequest ||
		!framing.Revision(version).CancelsByClose() && !framing.Revision(upstream.MetaVersion(m)).CancelsByClose() {
		return false
	}
	why := mismatch(&ctx.Request, m, string(version), tools)
	if why == "" {
		return false
	}
	writeJSON(ctx, fasthttp.StatusBadRequest, proxy.ErrorReply(m.ID, codeHeaderMismatch, "Header mismatch: "+why))
	return true
}

// refuseTaskMismatch is refuseMismatch for the tasks extension's
// requests alone, in front of a Streamable HTTP server: the sidecar may
// serve them itself (a task it hosts, policy task: host), and so makes
// the check their server would; a server of the extension makes the same.
func refuseTaskMismatch(ctx *fasthttp.RequestCtx, f *framing.Frame) bool {
	if f.Batch || !strings.HasPrefix(f.Msgs[0].Method, "tasks/") {
		return false
	}
	return refuseMismatch(ctx, f, nil)
}

// mismatch returns why a request's metadata headers disagree with its
// body, or "": the standard ones, and a tools/call's Mcp-Param-* against
// the tool's annotations, where tools knows them.
func mismatch(req *fasthttp.Request, m *framing.Message, version string, tools *mcpheader.Tools) string {
	if name := repeatedHeader(req); name != "" {
		return "the " + name + " header is repeated"
	}
	if v := upstream.MetaVersion(m); v != "" && v != version {
		return fmt.Sprintf("MCP-Protocol-Version header value %q does not match body value %q", version, v)
	}
	method := upstream.Peek(req.Header.All(), "Mcp-Method")
	switch {
	case len(method) == 0:
		return "the Mcp-Method header is missing"
	case string(method) != m.Method:
		return fmt.Sprintf("Mcp-Method header value %q does not match body value %q", method, m.Method)
	}
	switch m.Method {
	case "tools/call", "resources/read", "prompts/get", // the core's
		"tasks/get", "tasks/update", "tasks/cancel": // the tasks extension's: the task's id
	default:
		return ""
	}
	want, _ := upstream.MirroredName(m)
	h := bytes.Trim(upstream.Peek(req.Header.All(), "Mcp-Name"), " \t") // RFC 9110's optional white space is no part of the value
	if len(h) == 0 {
		return "the Mcp-Name header is missing"
	}
	got, err := mcpheader.Decode(string(h))
	switch {
	case err != nil:
		return fmt.Sprintf("Mcp-Name header value %q is %v", h, err)
	case got != want:
		return fmt.Sprintf("Mcp-Name header value %q does not match body value %q", got, want)
	}
	if m.Method == "tools/call" && m.ParamsSpan.Found() {
		header := func(name string) []byte { return upstream.Peek(req.Header.All(), name) }
		if err := tools.Check(want, m.Raw[m.ParamsSpan.Start:m.ParamsSpan.End], header); err != nil {
			return err.Error()
		}
	}
	return ""
}

// repeatedHeader returns the name of a request metadata header (Mcp-Method,
// Mcp-Name, an Mcp-Param-*) the request carries more than once, or "": a
// server reads one value, and an intermediary might read the other.
func repeatedHeader(req *fasthttp.Request) string {
	var seen []string
	for k := range req.Header.All() {
		name := strings.ToLower(string(k))
		if name != "mcp-method" && name != "mcp-name" && !strings.HasPrefix(name, "mcp-param-") {
			continue
		}
		if slices.Contains(seen, name) {
			return string(k)
		}
		seen = append(seen, name)
	}
	return ""
}
