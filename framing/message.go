package framing

import (
	"errors"
	"fmt"
	"unique"
)

// Kind says what a JSON-RPC message is.
type Kind uint8

// The kinds of message.
const (
	KindInvalid      Kind = iota // valid JSON, but not a JSON-RPC message
	KindRequest                  // method and id
	KindNotification             // method, no id
	KindResponse                 // result or error, and an id (null only on errors)
)

var kindNames = [...]string{"invalid", "request", "notification", "response"}

// String names the kind.
func (k Kind) String() string { return kindNames[k] }

// Span is the half-open byte range [Start, End) of a value within a frame.
// The zero Span means "absent".
type Span struct{ Start, End int }

// Found reports whether the span marks a value.
func (s Span) Found() bool { return s.End > s.Start }

// Message is what the classifier found in one JSON-RPC message. Raw aliases
// the frame it was parsed from; the other fields are small and owned.
type Message struct {
	// Raw is the message's bytes, exactly as read.
	Raw  []byte
	Kind Kind

	// ID and IDSpan: the request or response id and where it is in Raw.
	ID     ID
	IDSpan Span
	// Method is the method of a request or notification.
	Method string
	// IsError marks a response that carries "error" rather than "result".
	IsError bool

	// RequestID is params.requestId (meaningful on notifications/cancelled).
	RequestID     ID
	RequestIDSpan Span
	// Reason is params.reason when it is a string (meaningful on notifications/cancelled).
	Reason string
	// Token is params._meta.progressToken on a request, or params.progressToken
	// on notifications/progress.
	Token     ID
	TokenSpan Span
	// HasTask marks a task-augmented request (params.task is an object).
	HasTask bool
	// TaskID is result.task.taskId of a CreateTaskResult.
	TaskID string
	// NameSpan is where params.name is in Raw, when it is a string: the tool
	// of tools/call, the prompt of prompts/get.
	NameSpan Span
	// ParamsSpan and MetaSpan are where params and params._meta are in Raw,
	// whatever their kind, so that a field can be added without rewriting
	// the rest of the message.
	ParamsSpan, MetaSpan Span
	// TraceParentSpan and TraceStateSpan are where params._meta.traceparent
	// and tracestate are in Raw, whatever their kind (W3C trace context).
	TraceParentSpan, TraceStateSpan Span
	// SubscriptionID is params._meta's io.modelcontextprotocol/subscriptionId
	// (2026-07-28): the id of the subscriptions/listen request a
	// notification belongs to; SubscriptionIDSpan is where it is in Raw.
	SubscriptionID     ID
	SubscriptionIDSpan Span
	tokens             int // progressToken keys seen, top level and under _meta
}

// NameBytes returns params.name's bytes when the string has no escapes
// (they alias Raw), or nil.
func (m *Message) NameBytes() []byte {
	if m.NameSpan.End-m.NameSpan.Start < 2 {
		return nil
	}
	inner := m.Raw[m.NameSpan.Start+1 : m.NameSpan.End-1]
	for _, c := range inner {
		if c == '\\' {
			return nil
		}
	}
	return inner
}

// A LastName returns messages' names (params.name: a tools/call's tool)
// interned, so that a name seen before costs no allocation: compared first
// with the last one it returned (a session's calls repeat their tool),
// then looked up in the process's table (package unique), shared by every
// session, where names no longer in use are forgotten by the garbage
// collector: names a client invents cost no more than its calls hold. The
// zero LastName is ready; it is not safe for concurrent use.
type LastName struct{ last string }

// Of returns m's Name, interned when it has no escapes.
func (n *LastName) Of(m *Message) string {
	b := m.NameBytes()
	switch {
	case b == nil:
		return m.Name() // escaped, or none
	case string(b) != n.last:
		n.last = unique.Make(string(b)).Value()
	}
	return n.last
}

// Name returns params.name (see NameSpan), or "".
func (m *Message) Name() string {
	if m.NameSpan.End <= m.NameSpan.Start {
		return ""
	}
	s, _ := unquote(m.Raw[m.NameSpan.Start:m.NameSpan.End])
	return s
}

// Errors for JSON-RPC messages that are valid JSON but not valid messages.
var (
	ErrNotObject = errors.New("message is not a JSON object")
	ErrBadID     = errors.New("id must be a string or a number")
	ErrTwoTokens = errors.New("more than one progressToken (params and params._meta)")
	// ErrUnportableID refuses an id that servers' JSON libraries would not
	// echo byte for byte (2.0, 1e2, integers beyond 2^53, strings that are
	// not UTF-8): its answer could never be matched to it.
	ErrUnportableID = errors.New("id must be a string of valid UTF-8 or an integer within ±(2^53-1)")
	ErrBadMethod    = errors.New("method must be a string")
	ErrNoKind       = errors.New("message has neither method nor result nor error")
)

// An InvalidError is a frame that is well-formed JSON but not a valid
// JSON-RPC message: the answer is -32600 Invalid Request, not a parse error.
type InvalidError struct{ Err error }

// Error implements error.
func (e *InvalidError) Error() string { return "invalid JSON-RPC message: " + e.Err.Error() }

// Unwrap returns the reason.
func (e *InvalidError) Unwrap() error { return e.Err }

// Frame is one parsed line: a single message, or a batch (protocol
// 2025-03-26) of several. Reusing a Frame avoids allocation.
type Frame struct {
	// Raw is the whole line, without its newline.
	Raw []byte
	// Batch is true when the line was a JSON array.
	Batch bool
	// Msgs holds the messages in order; for a single message, one. Where an
	// element of a batch is invalid, its Message has Kind KindInvalid and
	// Errs holds the reason (an *InvalidError) at the same index.
	Msgs []Message
	Errs []error

	sc scanner
}

// Parse validates and classifies raw, which Frame then aliases. It returns a
// *SyntaxError for malformed JSON (the answer is -32700 Parse error) and an
// *InvalidError for a single message that is not valid JSON-RPC. For a batch,
// invalid elements are reported in Errs and Parse returns nil.
func (f *Frame) Parse(raw []byte) error {
	f.Raw, f.Batch = raw, false
	f.Msgs, f.Errs = f.Msgs[:0], f.Errs[:0]
	sc := &f.sc
	sc.data, sc.pos = raw, 0
	defer func() { sc.data = nil }()
	var err error
	if sc.peek() == '[' {
		err = f.parseBatch()
	} else {
		f.Msgs = append(f.Msgs, Message{})
		var invalid error
		invalid, err = parseMessage(sc, &f.Msgs[0])
		if err == nil && invalid != nil {
			err = &InvalidError{invalid}
		}
	}
	if _, invalid := err.(*InvalidError); err != nil && !invalid {
		return err
	}
	if sc.ws(); sc.pos != len(sc.data) {
		return sc.fail("trailing data after message")
	}
	return err
}

func (f *Frame) parseBatch() error {
	f.Batch = true
	sc := &f.sc
	sc.pos++
	if sc.peek() == ']' {
		sc.pos++
		return &InvalidError{errors.New("empty batch")}
	}
	for {
		var m Message
		invalid, err := parseMessage(sc, &m)
		if err != nil {
			return err
		}
		f.Msgs = append(f.Msgs, m)
		if invalid != nil {
			// Valid JSON (else the whole frame is a parse error), not a
			// message: -32600 Invalid Request, as JSON-RPC answers [1].
			invalid = &InvalidError{invalid}
		}
		f.Errs = append(f.Errs, invalid)
		switch sc.peek() {
		case ',':
			sc.pos++
		case ']':
			sc.pos++
			return nil
		default:
			return sc.fail("expected ',' or ']' in batch")
		}
	}
}

// parseMessage classifies the value at sc.pos into m. A syntax error comes
// back as err; a structurally wrong message as invalid, with the value consumed.
func parseMessage(sc *scanner, m *Message) (invalid, err error) {
	start := skipWS(sc)
	var hasID, nullID, hasResult bool
	var idSpan Span
	isObj, err := sc.fields(func(k Span, esc bool) error {
		switch string(keyName(sc.data, k, esc)) {
		case "id":
			span, err := sc.value()
			idSpan, hasID = span, true
			nullID = string(sc.data[span.Start:span.End]) == "null"
			return err
		case "method":
			span, err := sc.value()
			if err == nil {
				m.Method, invalid = methodName(sc.data, span)
			}
			return err
		case "params":
			at := sc.pos
			err := parseParams(sc, m)
			m.ParamsSpan = Span{at, sc.pos}
			return err
		case "result":
			hasResult = true
			return parseResult(sc, m)
		case "error":
			m.IsError = true
			return sc.skip()
		}
		return sc.skip()
	})
	if err != nil {
		return nil, err
	}
	if !isObj {
		if err := sc.skip(); err != nil {
			return nil, err
		}
		return ErrNotObject, nil
	}
	m.Raw = sc.data[start:sc.pos]
	idSpan.Start -= start
	idSpan.End -= start
	shiftSpan(&m.RequestIDSpan, start)
	shiftSpan(&m.TokenSpan, start)
	shiftSpan(&m.NameSpan, start)
	shiftSpan(&m.ParamsSpan, start)
	shiftSpan(&m.MetaSpan, start)
	shiftSpan(&m.TraceParentSpan, start)
	shiftSpan(&m.TraceStateSpan, start)
	if invalid == nil && m.tokens > 1 {
		// Only one could be renamed: the other might make a server report
		// progress under a token its sender does not own.
		invalid = ErrTwoTokens
	}
	if invalid != nil {
		if _, unportable := invalid.(*unportableIDError); !unportable && hasID && !nullID {
			if id, ok := parseID(m.Raw[idSpan.Start:idSpan.End]); ok {
				invalid = &refusedError{invalid, id} // answered under its id, so that its sender is not left waiting
			}
		}
		return invalid, nil
	}
	return classify(m, hasID, nullID, hasResult, idSpan), nil
}

func skipWS(sc *scanner) int { sc.ws(); return sc.pos }

func shiftSpan(s *Span, by int) {
	if s.Found() {
		s.Start -= by
		s.End -= by
	}
}

// classify sets m.Kind and m.ID from what parseMessage saw.
func classify(m *Message, hasID, nullID, hasResult bool, idSpan Span) error {
	if hasID && !nullID {
		id, ok := parseID(m.Raw[idSpan.Start:idSpan.End])
		if !ok {
			return ErrBadID
		}
		if !id.portable() {
			return &unportableIDError{literal: string(m.Raw[idSpan.Start:idSpan.End])}
		}
		m.ID, m.IDSpan = id, idSpan
	}
	switch {
	case m.Method != "" && !hasID:
		m.Kind = KindNotification
	case m.Method != "" && nullID:
		return fmt.Errorf("%w: request id is null", ErrBadID)
	case m.Method != "":
		m.Kind = KindRequest
	case hasResult || m.IsError:
		if !m.IsError && (nullID || !hasID) {
			return fmt.Errorf("%w: response without a usable id", ErrBadID)
		}
		m.Kind = KindResponse
	default:
		return ErrNoKind
	}
	return nil
}

// methodName returns the method string, interned for the names MCP defines.
func methodName(data []byte, span Span) (string, error) {
	raw := data[span.Start:span.End]
	if len(raw) < 3 || raw[0] != '"' {
		return "", ErrBadMethod
	}
	if s, ok := knownMethods[string(raw[1:len(raw)-1])]; ok {
		return s, nil
	}
	s, ok := unquote(raw)
	if !ok {
		return "", ErrBadMethod
	}
	return s, nil
}

// keyName returns an object key's bytes. Keys without escapes are returned
// in place, so that `switch string(keyName(...))` does not allocate.
func keyName(data []byte, k Span, escaped bool) []byte {
	raw := data[k.Start:k.End]
	if escaped {
		s, _ := unquote(raw)
		return []byte(s)
	}
	return raw[1 : len(raw)-1]
}

var errStop = errors.New("stop")

// unportableIDError is ErrUnportableID with the id as the sender wrote it.
type unportableIDError struct{ literal string }

func (e *unportableIDError) Error() string { return ErrUnportableID.Error() }
func (e *unportableIDError) Unwrap() error { return ErrUnportableID }

// refusedError is an invalid request whose id is fine: its answer names
// that id.
type refusedError struct {
	err error
	id  ID
}

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// ErrorID returns the id to answer an invalid message with: the id as its
// sender wrote it when the message was refused for its id (so that the
// sender can still match the error to its request), the message's id when
// it was refused for something else, else no id.
func ErrorID(err error) ID {
	var ue *unportableIDError
	if errors.As(err, &ue) {
		return ID{kind: idNumber, str: ue.literal} // written back as it came
	}
	var re *refusedError
	if errors.As(err, &re) {
		return re.id
	}
	return ID{}
}

// PeekID looks for a top-level "id" in the start of a message that was cut
// short (such as the Head of a FrameTooLargeError) and reports whether it
// found a string or number id there, and whether the message is a response
// (it has "result" or "error" before the point where it was cut, and no
// "method"). It never reads past head.
func PeekID(head []byte) (id ID, isResponse, ok bool) {
	sc := scanner{data: head}
	var hasMethod, hasResult bool
	sc.fields(func(k Span, esc bool) error {
		switch string(keyName(sc.data, k, esc)) {
		case "id":
			span, err := sc.value()
			if err != nil {
				return errStop
			}
			id, ok = parseID(head[span.Start:span.End])
			return nil
		case "method":
			hasMethod = true
		case "result", "error":
			hasResult = true
		}
		if err := sc.skip(); err != nil {
			return errStop
		}
		return nil
	})
	return id, hasResult && !hasMethod, ok
}
