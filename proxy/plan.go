package proxy

import "github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"

// Plan is what a transport does with one frame (a message, or a batch of
// them), as its Session decided each message in it: what is left to
// forward, the proxy's own answers for the sender, and the calls the frame
// opened, held or cancelled, for the transport to carry out.
type Plan struct {
	// Data is what is left to forward: the frame's own bytes when Same,
	// else the frame rebuilt from the messages kept; nil when nothing is.
	Data []byte
	// Same says the frame passes unchanged.
	Same bool
	// Batch says the frame is a batch.
	Batch bool
	// Kept are a batch's messages forwarded, and KeptCalls the request
	// each is (nil for one that is not): a transport that withdraws some of
	// them rebuilds the frame from the others (Rebuild). A single message
	// has no list: what is forwarded of it is Data.
	Kept      [][]byte
	KeptCalls []*Call
	// Requests are the requests being forwarded, held ones among them.
	Requests []*Call
	// Replies are the proxy's own answers for the sender.
	Replies [][]byte
	// Cancels are the requests whose accepted cancels (the client's) are
	// among the messages forwarded.
	Cancels []*Call
	// Deferred are the requests whose accepted cancels the session kept
	// for the governor to send (Outcome.Deferred): their clients are freed
	// (their streams end), and their answers are still read, until the
	// Carrier is told to Cancel them.
	Deferred []*Call
	// More are the other requests an accepted cancel named, in flight
	// under the same id (TrackerOptions.AllowSharedIDs), each with the
	// cancel the server must be sent for it.
	More []Cancellation
	// Held are the requests the governor keeps waiting, each with what
	// the transport's hold gave for it.
	Held []Held
	// Suppressed counts the messages held back as late (answers or
	// progress of cancelled requests).
	Suppressed int
	// Strays are the client's cancels of requests not in flight here
	// (another replica of a fleet may hold them); Withdrawn counts those of
	// requests held back here, which were never sent and neither are
	// their cancels.
	Strays    [][]byte
	Withdrawn int
	// WithdrawnCalls are the requests of Withdrawn.
	WithdrawnCalls []*Call
	// Timed says a request has a deadline; WantsLate that a request's
	// late answer is wanted after a cancel (see Admission).
	Timed, WantsLate bool
	// DeferCancel says a request's cancel may be deferred (see Outcome).
	DeferCancel bool
	// Trace is the trace context of the first request forwarded, when
	// traced: a transport with headers of its own sets them too.
	Trace TraceContext
}

// Held is a request the governor keeps waiting, with what the transport
// keeps of it (see Session.Hold).
type Held struct {
	Call   *Call
	Handle any
}

// DecideFrame decides every message of a parsed frame from a peer, as
// Decide does one (parent is the trace context the transport's request
// brought, if any), and returns the Plan. An invalid message of a batch
// gets its error reply. For each request the governor asks to hold, hold,
// when not nil, gives what the transport keeps of it, and the request is
// held (Session.Hold) before the next message is decided, so that a cancel
// later in the same batch withdraws it; without hold, such a request goes
// with the frame. A client's frame is decided with the lock held, as
// Decide's messages are.
func (s *Session) DecideFrame(from Peer, f *framing.Frame, parent TraceContext, hold func(*Call) any) Plan {
	p := Plan{Same: true, Batch: f.Batch}
	for i := range f.Msgs {
		m := &f.Msgs[i]
		var o Outcome
		if f.Batch && f.Errs[i] != nil {
			o = Outcome{Verdict: Drop, Reply: s.t.Invalid(from, f.Errs[i], m.Raw)}
		} else {
			o = s.Decide(from, m, parent)
		}
		p.add(from, m, o, s, hold)
	}
	switch {
	case p.Same:
		p.Data = f.Raw
	case f.Batch:
		p.Data = JoinFrame(p.Kept, true)
	} // else add set Data to the one message, if kept
	return p
}

// add folds one message's outcome into the plan.
func (p *Plan) add(from Peer, m *framing.Message, o Outcome, s *Session, hold func(*Call) any) {
	if p.Trace.Parent == "" {
		p.Trace = o.Trace
	}
	if o.Reply != nil {
		p.Replies = append(p.Replies, o.Reply)
	}
	p.More = append(p.More, o.More...)
	if o.Withdrawn { // held, never sent, and neither is its cancel
		p.Same = false
		p.Withdrawn++
		p.WithdrawnCalls = append(p.WithdrawnCalls, o.Cancelled)
		return
	}
	switch {
	case o.Cancelled != nil && from == Client && o.Deferred:
		p.Deferred = append(p.Deferred, o.Cancelled)
	case o.Cancelled != nil && from == Client:
		p.Cancels = append(p.Cancels, o.Cancelled)
	}
	if o.Request != nil {
		p.Requests = append(p.Requests, o.Request)
		p.Timed = p.Timed || o.Timed
		p.WantsLate = p.WantsLate || o.WantsLate
		p.DeferCancel = p.DeferCancel || o.DeferCancel
		if o.Hold && hold != nil {
			h := hold(o.Request)
			s.Hold(o.Request, h)
			p.Held = append(p.Held, Held{o.Request, h})
		}
	}
	if o.Verdict != Forward {
		if o.Verdict == Suppress {
			p.Suppressed++
		}
		if from == Client && o.Cancelled == nil && m.Method == framing.MethodCancelled && m.RequestID.IsValid() {
			p.Strays = append(p.Strays, m.Raw)
		}
		p.Same = false
		return
	}
	kept := m.Raw
	if o.Rewritten != nil {
		p.Same = false
		kept = o.Rewritten
	}
	if !p.Batch {
		p.Data = kept // no list for one message
		return
	}
	p.Kept = append(p.Kept, kept)
	p.KeptCalls = append(p.KeptCalls, o.Request)
}

// Rebuild returns the frame to forward without the requests in gone
// (withdrawn while held), and drops them from Requests; nil when nothing
// is left.
func (p *Plan) Rebuild(gone map[*Call]bool) []byte {
	var kept [][]byte
	for i, raw := range p.Kept {
		if c := p.KeptCalls[i]; c == nil || !gone[c] {
			kept = append(kept, raw)
		}
	}
	if !p.Batch && p.Data != nil && (len(p.Requests) == 0 || !gone[p.Requests[0]]) {
		kept = append(kept, p.Data) // the one message, still going
	}
	var requests []*Call
	for _, c := range p.Requests {
		if !gone[c] {
			requests = append(requests, c)
		}
	}
	p.Requests = requests
	return JoinFrame(kept, p.Batch)
}

// JoinFrame rebuilds a single message or a batch from what is left of it;
// nil when nothing is.
func JoinFrame(msgs [][]byte, batch bool) []byte {
	switch {
	case len(msgs) == 0:
		return nil
	case !batch:
		return msgs[0]
	}
	n := 1
	for _, m := range msgs {
		n += len(m) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, '[')
	for i, m := range msgs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	return append(out, ']')
}
