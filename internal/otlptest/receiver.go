// Package otlptest is an OTLP trace receiver for tests: a real OTLP/HTTP
// (protobuf) or OTLP/gRPC endpoint on 127.0.0.1 that decodes what an
// exporter sends and keeps the spans for the test to look at.
package otlptest

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// A client's trace context, for tests to send: the W3C example's.
const (
	ClientTrace       = "4bf92f3577b34da6a3ce929d0e0e4736"
	ClientSpan        = "00f067aa0ba902b7"
	ClientTraceParent = "00-" + ClientTrace + "-" + ClientSpan + "-01"
)

// Span is a received span, its ids in hex.
type Span struct {
	TraceID, SpanID, ParentID string
	Name                      string
	Kind                      tracepb.Span_SpanKind
	Attrs                     map[string]string
	Events                    []Event
	Error                     bool   // status ERROR
	Status                    string // the status's description
	Service                   string // the resource's service.name
}

// Event is one of a span's events.
type Event struct {
	Name  string
	Attrs map[string]string
}

// HasEvent reports whether the span has an event called name.
func (s Span) HasEvent(name string) bool {
	for _, e := range s.Events {
		if e.Name == name {
			return true
		}
	}
	return false
}

// Receiver keeps the spans exported to it.
type Receiver struct {
	// URL is the endpoint to export to: http://127.0.0.1:PORT.
	URL string

	mu      sync.Mutex
	spans   []Span
	changed chan struct{} // closed and replaced when spans come
}

func newReceiver() *Receiver { return &Receiver{changed: make(chan struct{})} }

// StartHTTP serves OTLP/HTTP (POST /v1/traces, protobuf) until the test ends.
func StartHTTP(t testing.TB) *Receiver {
	r := newReceiver()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(r.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	r.URL = "http://" + ln.Addr().String()
	return r
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "not an OTLP traces endpoint", http.StatusNotFound)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	var msg coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(data, &msg)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&msg)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// StartGRPC serves OTLP/gRPC until the test ends.
func StartGRPC(t testing.TB) *Receiver {
	r := newReceiver()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, grpcService{r: r})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	r.URL = "http://" + ln.Addr().String()
	return r
}

type grpcService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *Receiver
}

func (g grpcService) Export(_ context.Context, msg *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.r.add(msg)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// add keeps the spans of one export.
func (r *Receiver) add(msg *coltracepb.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range msg.ResourceSpans {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					ParentID: hex.EncodeToString(s.ParentSpanId), Name: s.Name, Kind: s.Kind, Attrs: attrs(s.Attributes),
					Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, Status: s.GetStatus().GetMessage(),
					Service: service}
				for _, e := range s.Events {
					sp.Events = append(sp.Events, Event{Name: e.Name, Attrs: attrs(e.Attributes)})
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// attrs flattens attributes to strings.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = strconv.FormatBool(v.BoolValue)
		default:
			m[kv.Key] = kv.GetValue().String()
		}
	}
	return m
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Wait waits, at most within, for a span that match accepts, and returns
// it; the test fails, listing what came, if none does.
func (r *Receiver) Wait(t testing.TB, within time.Duration, what string, match func(Span) bool) Span {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		for _, s := range r.spans {
			if match(s) {
				r.mu.Unlock()
				return s
			}
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			for _, s := range r.Spans() {
				t.Logf("span %s: trace %s id %s parent %s attrs %v events %v error %v %q", s.Name, s.TraceID, s.SpanID, s.ParentID, s.Attrs, s.Events, s.Error, s.Status)
			}
			t.Fatalf("no span %s came within %v", what, within)
			return Span{}
		}
	}
}
