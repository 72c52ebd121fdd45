package httpx

import (
	"cmp"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// registry holds the trackers of the sessions the upstream has opened.
type registry struct {
	mu    sync.Mutex // guards m
	m     map[string]*session
	idle  time.Duration // how long an unused session is kept; set by init
	clock clock.Clock
}

func (r *registry) init(idle time.Duration, clk clock.Clock) {
	r.m = make(map[string]*session)
	r.clock = clk
	r.idle = cmp.Or(idle, DefaultSessionIdle)
}

// session is one Mcp-Session-Id's state, or one request's when there is no
// session.
type session struct {
	// scope names the session in logs, which never show session ids (a
	// session id can be as good as a credential).
	scope string
	idMu  sync.Mutex // guards id, which adopt sets once
	id    string
	t     *proxy.Tracker
	// gov applies the policy to the session's requests, if there is one.
	gov     proxy.Governor
	govOnce sync.Once
	// decideMu is held while a POST's messages are decided and their
	// streams attached, and by the governor's actions.
	decideMu sync.Mutex

	mu sync.Mutex // guards streams, holds and version
	// streams maps each client request still in flight to the response
	// stream that will carry its answer.
	streams map[*proxy.Call]*stream
	// holds are the requests the governor keeps waiting (max_concurrent).
	holds map[*proxy.Call]*hold
	// version is the MCP-Protocol-Version the client last sent.
	version string
	// lastUsed is when the session last saw a request, in UnixNano.
	lastUsed atomic.Int64
	// lastResume is when the client last resumed a stream, in UnixNano.
	lastResume atomic.Int64
	// open counts the session's response streams being relayed (GET
	// streams included).
	open atomic.Int32
}

func newSession(id string, s *Sidecar, governed bool) *session {
	sess := &session{id: id, scope: fmt.Sprintf("s%d", scopes.Add(1)), streams: make(map[*proxy.Call]*stream)}
	opts := s.Tracker
	opts.Logger = s.log.With(zap.String("scope", sess.scope))
	if s.Governor != nil && governed {
		sess.gov = s.Governor(sess.scope)(actions{s: s, sess: sess})
		opts.Governor = sess.gov
	}
	sess.t = proxy.NewTracker(opts)
	return sess
}

// scopes numbers the sessions for logs.
var scopes atomic.Int64

// DefaultSessionIdle is how long a session may go without a request, and
// with nothing in flight and no stream open, before the sidecar forgets it
// (a client that never sends DELETE), when Sidecar.SessionIdle is zero.
const DefaultSessionIdle = 30 * time.Minute

// lookup returns the session with the given id, if the sidecar knows it.
func (r *registry) lookup(id string) *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	sess := r.m[id]
	if sess != nil {
		sess.lastUsed.Store(r.clock.Now().UnixNano())
	}
	return sess
}

// sweepLocked forgets sessions idle for longer than r.idle, and returns
// them, for the caller to close their governors once unlocked. A session
// with a request in flight or a stream open is never idle: a cancel may
// still come for it.
func (r *registry) sweepLocked() []*session {
	cutoff := r.clock.Now().Add(-r.idle).UnixNano()
	var swept []*session
	for id, sess := range r.m {
		if inFlight, _ := sess.t.InFlight(); sess.lastUsed.Load() < cutoff && inFlight == 0 && sess.open.Load() == 0 {
			delete(r.m, id)
			swept = append(swept, sess)
		}
	}
	return swept
}

// registered reports whether sess is the session the registry holds
// under its id.
func (r *registry) registered(sess *session) bool {
	id := sess.sessionID()
	r.mu.Lock()
	defer r.mu.Unlock()
	return id != "" && r.m[id] == sess
}

// adopt registers sess under id, the session id the upstream assigned in
// its answer to initialize, and returns the registered session.
func (r *registry) adopt(id string, sess *session) *session {
	r.mu.Lock()
	if old, ok := r.m[id]; ok {
		r.mu.Unlock()
		return old
	}
	sess.idMu.Lock()
	sess.id = id
	sess.idMu.Unlock()
	sess.lastUsed.Store(r.clock.Now().UnixNano())
	swept := r.sweepLocked()
	r.m[id] = sess
	r.mu.Unlock()
	for _, old := range swept {
		old.closeGovernor()
	}
	return sess
}

// remove forgets a session.
func (r *registry) remove(id string) *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	sess := r.m[id]
	delete(r.m, id)
	return sess
}

// attach notes that the answer to c will come on st.
func (sess *session) attach(c *proxy.Call, st *stream) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.streams[c] = st
}

// detach forgets the streams of calls that are answered or gone.
func (sess *session) detach(st *stream) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	for c, s := range sess.streams {
		if s == st {
			delete(sess.streams, c)
		}
	}
}

// cancelled ends, after grace, the stream that would have carried c's
// answer, if that stream carries nothing else the client still waits for.
func (sess *session) cancelled(c *proxy.Call, grace time.Duration) {
	sess.mu.Lock()
	st := sess.streams[c]
	delete(sess.streams, c)
	waiting := false
	for _, s := range sess.streams {
		waiting = waiting || s == st
	}
	sess.mu.Unlock()
	if st != nil && !waiting {
		st.endAfter(grace)
	}
}

// sessionID returns the session's id; empty for a request without one.
func (sess *session) sessionID() string {
	sess.idMu.Lock()
	defer sess.idMu.Unlock()
	return sess.id
}

// callsOn returns the client requests whose answers st was to carry.
func (sess *session) callsOn(st *stream) []*proxy.Call {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	var calls []*proxy.Call
	for c, s := range sess.streams {
		if s == st {
			calls = append(calls, c)
		}
	}
	return calls
}

// resumed notes that the client resumed a stream (a GET with
// Last-Event-ID): dropped connections before now were not abandonment.
func (sess *session) resumed(now time.Time) { sess.lastResume.Store(now.UnixNano()) }

// endAll ends every stream of the session.
func (sess *session) endAll() {
	sess.mu.Lock()
	var streams []*stream
	for c, st := range sess.streams {
		streams = append(streams, st)
		delete(sess.streams, c)
	}
	sess.mu.Unlock()
	for _, st := range streams { // outside the lock: ending waits for a read in progress
		st.end(errStreamCancelled)
	}
}

// setVersion notes the protocol version the client speaks in this session.
func (sess *session) setVersion(v []byte) {
	if len(v) == 0 {
		return
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.version = string(v)
}

// protocolVersion returns the revision the client named in its headers, if
// it named one.
func (sess *session) protocolVersion() framing.Revision {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return framing.Revision(sess.version)
}
