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

// mirrorsParams reports whether r is a 2026-07-28 tools/call whose
// mirrored parameters' headers (Mcp-Param-*) the proxy sets, from r.Tools
// (see Build): its own client mirrors none (a stdio client, an old one, a
// 2025 client whose request it sent as a 2026-07-28 one).
func (r *Request) mirrorsParams() bool {
	m := r.Msg
	return r.Tools != nil && m != nil && m.Method == "tools/call" && m.ParamsSpan.Found() &&
		framing.Revision(cmp.Or(MetaVersion(m), r.Version)).CancelsByClose()
}

// BeforeCall reads tools/list first, as l says (its Log and Watch; the
// rest is r's), where r is a call whose mirrored parameters the proxy sets
// and nothing was read since the list went stale. A tool the list does
// not name is called as it is: its server's answer says what it thinks of
// the call.
func (u *StreamableUpstream) BeforeCall(r *Request, l ToolsRead) {
	if r.mirrorsParams() {
		u.readFirst(*r, l)
	}
}

// readFirst is BeforeCall's read, apart: its copies of r and l, which the
// read's closure holds, are made only for a call that needs them.
func (u *StreamableUpstream) readFirst(r Request, l ToolsRead) {
	u.tools.ReadOnce(func() { u.relist(&r, l) })
}

// AfterCall returns the answer to r, a call sent: resp, or, when the
// server refused the headers of a call whose parameters the proxy
// mirrored (400, HeaderMismatch: its tools changed), the answer to r sent
// once more after reading tools/list again (as l says), as the spec asks a
// client to. Another answer, or a refusal of the second, is returned as it
// came. The one retry of a refused call, for the relay's and every Conn's.
func (u *StreamableUpstream) AfterCall(r Request, resp *fasthttp.Response, l ToolsRead) (*fasthttp.Response, error) {
	if !r.mirrorsParams() || !u.Refused(resp, r.Msg) {
		return resp, nil
	}
	return u.callAgain(r, resp, l)
}

// callAgain is AfterCall's second try, apart (see readFirst).
func (u *StreamableUpstream) callAgain(r Request, resp *fasthttp.Response, l ToolsRead) (*fasthttp.Response, error) {
	fasthttp.ReleaseResponse(resp)
	l.Log.Debug("the upstream refused a call's headers: tools/list is read again, and the call sent once more", zap.String("tool", r.Msg.Name()))
	u.tools.Reread(func() { u.relist(&r, l) })
	r.Posting = nil // the first one's: written, and answered
	return u.Do(r, 0)
}

// lister is how the Conn reads tools/list itself: its reads are cut
// when it closes.
func (c *StreamConn) lister() ToolsRead {
	watch := func(body fasthttp.ReadCloserWithError) func() {
		if c.track(body, nil) != nil {
			return nil
		}
		return func() { c.untrack(body, nil) }
	}
	return ToolsRead{Watch: watch, Log: c.log}
}

// LearnTools learns the tools' mirrored parameters from data, a
// 2026-07-28 tools/list answer a client of the server's gets, and returns
// it as the client is to see it: without the tools whose x-mcp-header
// annotations are invalid, which a client must leave out (each warned of
// once).
func (u *StreamableUpstream) LearnTools(data []byte, log *zap.Logger) []byte {
	kept, rejected := u.tools.Learn(data)
	u.listed.Store(true)
	WarnRejected(log, u.tools.Unwarned(rejected))
	if kept != nil {
		return kept
	}
	return data
}

// Heard notes a message of the server's that a client of it gets: a
// tools/list_changed makes the tools read from an answer stale (they are
// read again before the next call).
func (u *StreamableUpstream) Heard(data []byte) {
	if u.listed.Load() && bytes.Contains(data, listChanged) {
		u.tools.Forget()
	}
}

// relist reads the server's tools/list afresh, every page, as the client
// whose call r is (its _meta, its session, its request's headers), into
// the tools every client of the server shares.
func (u *StreamableUpstream) relist(r *Request, l ToolsRead) {
	l.Tools, l.Of, l.Session, l.From, l.MaxBody = &u.tools, r.Msg, r.Session, r.From, u.MaxBodySize
	u.ReadTools(l)
	u.listed.Store(true)
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
