package upstream

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/mcpheader"
)

// A 2026-07-28 client mirrors a tools/call's annotated arguments into
// Mcp-Param-* headers, from the tool's definition in tools/list. The bridge
// learns the definitions from the tools/list answers its client reads
// (learnTools); where it has read none (its client never listed the tools,
// or their list changed since), it reads tools/list itself before the call, and when the server refuses a call's headers
// (HeaderMismatch, -32020) it reads it again and sends the call once more,
// as the spec asks a client to.

// codeHeaderMismatch is 2026-07-28's HeaderMismatch error code.
const codeHeaderMismatch = -32020

// listChanged is what a message of the server's that makes the tools read
// stale contains.
var listChanged = []byte(`"notifications/tools/list_changed"`)

// maxToolPages bounds the pages of tools/list the backend reads itself.
const maxToolPages = 16

// ownWait bounds the wait for the answer to a tools/list of the backend's.
const ownWait = 30 * time.Second

// toolsFirst reads tools/list, before m goes, where m is a 2026-07-28
// tools/call and the backend has read no tools/list (since the last one
// went stale). A tool the list does not name is called as it is: its
// server's answer says what it thinks of the call.
func (c *StreamConn) toolsFirst(m *framing.Message, session string) {
	if c.modernCall(m) {
		c.u.tools.ReadOnce(func() { c.relist(m, session) })
	}
}

// modernCall reports whether m is a tools/call of revision 2026-07-28.
func (c *StreamConn) modernCall(m *framing.Message) bool {
	if m == nil || m.Method != "tools/call" {
		return false
	}
	c.mu.Lock()
	version := cmp.Or(MetaVersion(m), c.version)
	c.mu.Unlock()
	return framing.Revision(version).CancelsByClose()
}

// retryMismatch sends m (its bytes msg) once more when the server refused
// its headers (400, HeaderMismatch), after reading tools/list again; resp
// and err become the second answer's. Another 400 is left as it came.
func (c *StreamConn) retryMismatch(m *framing.Message, msg []byte, session string, resp **fasthttp.Response, err *error) {
	if *err != nil || !c.modernCall(m) || !c.u.Refused(*resp, m) {
		return
	}
	fasthttp.ReleaseResponse(*resp)
	c.log.Debug("the upstream refused a call's headers: tools/list is read again, and the call sent once more", zap.String("tool", m.Name()))
	c.u.tools.Reread(func() { c.relist(m, session) })
	*resp, *err = c.request(Request{Body: msg, Session: session, Msg: m, Tools: &c.u.tools}, 0)
}

// Refused reports whether resp, the answer to m, is the server's refusal
// of the headers a 2026-07-28 tools/call mirrors (400, HeaderMismatch):
// what the clients of it learned of its tools is then stale, and the call
// is sent once more after reading tools/list again, as the spec asks a
// client to. Every client of the proxy's (the relay, a Conn) asks it so.
// A 400's body is read and put back, for the caller to pass on.
func (u *StreamableUpstream) Refused(resp *fasthttp.Response, m *framing.Message) bool {
	if resp.StatusCode() != fasthttp.StatusBadRequest || m == nil || m.Method != "tools/call" {
		return false
	}
	body, _ := ReadAll(BodyOf(resp), resp.Header.ContentLength(), cmp.Or(u.MaxBodySize, framing.DefaultMaxFrameSize))
	resp.CloseBodyStream()
	resp.SetBodyStream(bytes.NewReader(body), len(body))
	if !RefusesHeaders(body) {
		return false
	}
	u.tools.Forget()
	return true
}

// RefusesHeaders reports whether body is 2026-07-28's HeaderMismatch
// error (-32020): the server refused a request's mirrored headers, and a
// client reads tools/list again and sends the request once more.
func RefusesHeaders(body []byte) bool {
	if !bytes.Contains(body, []byte("-32020")) {
		return false
	}
	var e struct {
		Error struct{ Code int } `json:"error"`
	}
	return json.Unmarshal(body, &e) == nil && e.Error.Code == codeHeaderMismatch
}

// relist reads the server's tools/list afresh, every page, as the client
// whose request m is (its _meta), into b.tools; Stop ends the read.
func (c *StreamConn) relist(m *framing.Message, session string) {
	watch := func(body fasthttp.ReadCloserWithError) func() {
		if c.track(body, nil) != nil {
			return nil
		}
		return func() { c.untrack(body, nil) }
	}
	c.u.ReadTools(ToolsRead{Tools: &c.u.tools, Of: m, Session: session, MaxBody: c.u.MaxBodySize, Watch: watch, Log: c.log})
	c.u.listed.Store(true)
}

// ToolsRead is a client's own read of a 2026-07-28 server's tools/list.
type ToolsRead struct {
	// Tools learns what the answers say, afresh. Required.
	Tools *mcpheader.Tools
	// Of is the client's request whose _meta (version, client info and
	// capabilities) the read carries. Required.
	Of *framing.Message
	// Session names the session, if any; MaxBody bounds an answer.
	Session string
	MaxBody int
	// From, if not nil, is the client's request whose headers (its
	// credentials) the read carries, as the relay's requests do.
	From *fasthttp.Request
	// Watch, if set, holds each answer's stream while it is read, and
	// returns what to call after (nil: do not read it); closing the
	// stream ends the read.
	Watch func(fasthttp.ReadCloserWithError) func()
	// Log warns once of each tool left out for invalid annotations.
	Log *zap.Logger
}

// ReadTools reads the server's tools/list itself, every page (up to 16),
// into r.Tools: for a client with nothing read, or whose read is stale.
func (e *Endpoint) ReadTools(r ToolsRead) {
	r.Tools.Forget()
	defer r.Tools.MarkRead()
	meta := []byte(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`)
	if r.Of.MetaSpan.Found() {
		meta = r.Of.Raw[r.Of.MetaSpan.Start:r.Of.MetaSpan.End]
	}
	cursor := ""
	for range maxToolPages {
		params := map[string]any{"_meta": json.RawMessage(meta)}
		if cursor != "" {
			params["cursor"] = cursor
		}
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": ownToolsID, "method": "tools/list", "params": params})
		answer := e.ownRequest(body, r)
		if answer == nil {
			return
		}
		_, rejected := r.Tools.Learn(answer)
		WarnRejected(r.Log, r.Tools.Unwarned(rejected))
		var page struct {
			Result struct {
				NextCursor string `json:"nextCursor"`
			} `json:"result"`
		}
		if json.Unmarshal(answer, &page) != nil || page.Result.NextCursor == "" {
			return
		}
		cursor = page.Result.NextCursor
	}
}

// WarnRejected logs each tool left out of a tools/list for its invalid
// x-mcp-header annotations.
func WarnRejected(log *zap.Logger, rejected []mcpheader.Rejected) {
	for _, rj := range rejected {
		log.Warn("a tool with an invalid x-mcp-header annotation is left out of tools/list", zap.String("tool", rj.Tool), zap.Error(rj.Why))
	}
}

// errOwnWait ends the read of an answer the client waited for too long.
var errOwnWait = errors.New("no answer to the proxy's tools/list in time")

// ownToolsID is the id of the proxy's own tools/list requests.
const ownToolsID = "mcp-cancel-proxy-tools"

// ownRequest POSTs a request of the proxy's own and returns its answer
// (the response under ownToolsID, JSON or from an event stream), or nil.
func (e *Endpoint) ownRequest(body []byte, r ToolsRead) []byte {
	var f framing.Frame
	if f.Parse(body) != nil {
		return nil
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	e.Build(req, Request{Body: body, Session: r.Session, Msg: &f.Msgs[0], From: r.From})
	req.Header.Del("Mcp-Name") // the client's request's, if From: tools/list has none
	resp, err := e.Send(req, ownWait)
	if err != nil {
		r.Log.Debug("reading tools/list failed", zap.Error(err))
		return nil
	}
	defer fasthttp.ReleaseResponse(resp)
	limit := cmp.Or(r.MaxBody, framing.DefaultMaxFrameSize)
	stream := BodyOf(resp)
	defer stream.CloseWithError(nil)
	if resp.StatusCode() != fasthttp.StatusOK {
		return nil
	}
	if r.Watch != nil {
		done := r.Watch(stream)
		if done == nil {
			return nil
		}
		defer done()
	}
	defer time.AfterFunc(ownWait, func() { stream.CloseWithError(errOwnWait) }).Stop() // a server that never answers
	if !IsEventStream(resp.Header.ContentType()) {
		data, err := io.ReadAll(io.LimitReader(stream, int64(limit)))
		if err != nil {
			return nil
		}
		return data
	}
	rd := framing.NewSSEReader(stream, limit)
	defer rd.Release()
	id := framing.StringID(ownToolsID)
	for {
		ev, err := rd.Next()
		if err != nil {
			return nil
		}
		if ev.HasData && answers(ev.Data, id) {
			answer := bytes.Clone(ev.Data)
			io.Copy(io.Discard, io.LimitReader(stream, int64(limit))) // the stream ends with its answer: read to its end, the connection is kept
			return answer
		}
	}
}
