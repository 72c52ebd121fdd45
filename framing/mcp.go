package framing

// MCP method names the proxy acts on.
const (
	MethodInitialize  = "initialize"
	MethodInitialized = "notifications/initialized"
	MethodCancelled   = "notifications/cancelled"
	MethodProgress    = "notifications/progress"
	MethodTasksCancel = "tasks/cancel"
	// MethodTaskStatus (2025-11-25) tells a task's issuer its new status.
	MethodTaskStatus = "notifications/tasks/status"
	// MethodSubscriptionsListen (2026-07-28) opens a stream of a client's
	// subscriptions; on stdio the server ends it with notifications/cancelled.
	MethodSubscriptionsListen = "subscriptions/listen"
	// SubscriptionIDKey (2026-07-28) is the _meta key that ties a
	// notification to the subscriptions/listen request it belongs to: its
	// value is that request's id.
	SubscriptionIDKey = "io.modelcontextprotocol/subscriptionId"
)

// Revision is an MCP protocol revision, named by its date ("2025-11-25"):
// dates compare in time order as strings. The empty Revision is unknown.
type Revision string

// RevisionStateless is the first revision without sessions, in which, on
// HTTP, closing a request's stream is its cancel.
const RevisionStateless Revision = "2026-07-28"

// CancelsByClose reports whether, on HTTP, closing a request's stream
// cancels it: from 2026-07-28 on. Before, a disconnect is not a cancel
// (clients resume or poll), and a cancel is a notification.
func (r Revision) CancelsByClose() bool { return r >= RevisionStateless }

// knownMethods interns the method names of every MCP revision, so that
// classifying a frame with a known method does not allocate.
var knownMethods = func() map[string]string {
	names := []string{
		MethodInitialize, MethodInitialized, MethodCancelled, MethodProgress, MethodTasksCancel,
		"ping", "tools/list", "tools/call", "resources/list", "resources/read",
		"resources/templates/list", "resources/subscribe", "resources/unsubscribe",
		"prompts/list", "prompts/get", "completion/complete", "logging/setLevel",
		"sampling/createMessage", "elicitation/create", "roots/list",
		"tasks/get", "tasks/result", "tasks/list", "tasks/update",
		"server/discover", "subscriptions/listen",
		"notifications/message", "notifications/roots/list_changed",
		"notifications/tools/list_changed", "notifications/resources/list_changed",
		"notifications/resources/updated", "notifications/prompts/list_changed",
		MethodTaskStatus, "notifications/elicitation/complete",
	}
	m := make(map[string]string, len(names))
	for _, n := range names {
		m[n] = n
	}
	return m
}()

// parseParams scans params, noting requestId, progressToken (top level, as on
// notifications/progress, or under _meta, as on requests) and task.
func parseParams(sc *scanner, m *Message) error {
	isObj, err := sc.fields(func(k Span, esc bool) error {
		switch string(keyName(sc.data, k, esc)) {
		case "requestId":
			return scanID(sc, &m.RequestID, &m.RequestIDSpan)
		case "progressToken":
			m.tokens++
			return scanID(sc, &m.Token, &m.TokenSpan)
		case "reason":
			span, err := sc.value()
			if err == nil && sc.data[span.Start] == '"' {
				m.Reason, _ = unquote(sc.data[span.Start:span.End])
			}
			return err
		case "task":
			m.HasTask = sc.peek() == '{'
			return sc.skip()
		case "name":
			return scanString(sc, &m.NameSpan)
		case "_meta":
			at := sc.pos
			err := parseMeta(sc, m)
			m.MetaSpan = Span{at, sc.pos}
			return err
		}
		return sc.skip()
	})
	if err == nil && !isObj {
		err = sc.skip()
	}
	return err
}

func parseMeta(sc *scanner, m *Message) error {
	isObj, err := sc.fields(func(k Span, esc bool) error {
		switch string(keyName(sc.data, k, esc)) {
		case "progressToken":
			m.tokens++
			return scanID(sc, &m.Token, &m.TokenSpan)
		case "traceparent": // any value: one that is no string is replaced all the same
			return scanValue(sc, &m.TraceParentSpan)
		case "tracestate":
			return scanValue(sc, &m.TraceStateSpan)
		case SubscriptionIDKey:
			return scanID(sc, &m.SubscriptionID, &m.SubscriptionIDSpan)
		}
		return sc.skip()
	})
	if err == nil && !isObj {
		err = sc.skip()
	}
	return err
}

// scanValue scans a value, and notes where it is.
func scanValue(sc *scanner, at *Span) error {
	span, err := sc.value()
	if err == nil {
		*at = span
	}
	return err
}

// scanString scans a value, and notes where it is when it is a string.
func scanString(sc *scanner, at *Span) error {
	span, err := sc.value()
	if err == nil && sc.data[span.Start] == '"' {
		*at = span
	}
	return err
}

// parseResult scans result for task.taskId (a CreateTaskResult).
func parseResult(sc *scanner, m *Message) error {
	isObj, err := sc.fields(func(k Span, esc bool) error {
		if string(keyName(sc.data, k, esc)) != "task" {
			return sc.skip()
		}
		isTask, err := sc.fields(func(k Span, esc bool) error {
			if string(keyName(sc.data, k, esc)) != "taskId" {
				return sc.skip()
			}
			span, err := sc.value()
			if err == nil && sc.data[span.Start] == '"' {
				m.TaskID, _ = unquote(sc.data[span.Start:span.End])
			}
			return err
		})
		if err == nil && !isTask {
			err = sc.skip()
		}
		return err
	})
	if err == nil && !isObj {
		err = sc.skip()
	}
	return err
}

// scanID scans a value that should be an id. A value that is not a string or
// number leaves id and span unset: the caller treats it as absent.
func scanID(sc *scanner, id *ID, span *Span) error {
	s, err := sc.value()
	if err != nil {
		return err
	}
	if v, ok := parseID(sc.data[s.Start:s.End]); ok {
		*id, *span = v, s
	}
	return nil
}
