package upstream

import "testing"

// TestIsEventStream: the media type in any case, with parameters and
// surrounding space; nothing else.
func TestIsEventStream(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/event-stream": true, "Text/Event-Stream; charset=utf-8": true, " text/event-stream ": true,
		"application/json": false, "text/event": false, "": false, "text/event-streamx": false, "text/event-stream ;x=1": true,
	} {
		if got := IsEventStream([]byte(ct)); got != want {
			t.Errorf("isEventStream(%q) = %v, want %v", ct, got, want)
		}
	}
}
