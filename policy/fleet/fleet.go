// Package fleet shares the hook jobs of a fleet of proxies through NATS
// JetStream: each job goes to a work-queue stream (deduplicated by its
// idempotency key), and every replica's worker takes jobs from the one
// durable consumer, so that any replica runs a job, and the job of a
// replica that died mid-attempt is delivered to another once its ack wait
// has passed. The audit trail can be published to a subject as well.
//
// Nothing here runs unless the configuration names a NATS server.
package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/jobs"
)

// Names in NATS.
const (
	StreamName   = "MCP_CANCEL_PROXY_HOOKS"
	JobSubject   = "mcp-cancel-proxy.hooks.job"
	ConsumerName = "hook-workers"
	// CancelSubject, followed by a session's key, carries the cancels one
	// replica asks the others to accept.
	CancelSubject = "mcp-cancel-proxy.cancel"
	// EndSubject, followed by a session's key, says a client ended the
	// session (DELETE) through one replica.
	EndSubject = "mcp-cancel-proxy.session-end"
)

// ErrNotConnected is what Publish and PublishAudit answer while NATS is
// not connected.
var ErrNotConnected = errors.New("NATS is not connected")

// AskWait bounds the wait for the replica that holds a cancelled request.
const AskWait = 500 * time.Millisecond

// accepted is the answer of the replica that accepted a cancel.
var accepted = []byte("accepted")

// DefaultAckWait is how long a replica may hold a job without a word before
// the others get it.
const DefaultAckWait = 60 * time.Second

// DefaultMaxDeliver bounds the deliveries of one job: enough for a hook's
// most retries (100) and the redeliveries of replicas that stop mid-job,
// while a job no replica can run (a forged one) leaves the queue in time.
const DefaultMaxDeliver = 120

// publishWait bounds a publish (its acknowledgement by the stream).
const publishWait = 5 * time.Second

// Options configures a Queue.
type Options struct {
	// URL names the NATS server(s), comma-separated.
	URL string
	// CredentialsFile is a NATS credentials (.creds) file, if any.
	CredentialsFile string
	// Token authenticates, if set (taken from the environment, never from
	// the configuration file).
	Token string
	// Name names the connection in the server's monitoring.
	Name string
	// AckWait: DefaultAckWait if zero.
	AckWait time.Duration
	// Lease is how long a fleet-wide slot stays held after its holder last
	// said so: DefaultLease if zero.
	Lease time.Duration
	// MaxDeliver bounds the deliveries of one job (the queue's consumer
	// delivers it no more often): DefaultMaxDeliver if zero.
	MaxDeliver int
	Logger     *zap.Logger
}

// Queue is a replica's connection to the fleet's jobs.
type Queue struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	opts Options
	log  *zap.Logger

	mu   sync.Mutex // guards cons
	cons jetstream.Consumer
}

// Dial connects to NATS. It succeeds while NATS is unreachable too: the
// connection is retried in the background, and Publish fails until then.
func Dial(o Options) (*Queue, error) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.AckWait <= 0 {
		o.AckWait = DefaultAckWait
	}
	if o.MaxDeliver <= 0 {
		o.MaxDeliver = DefaultMaxDeliver
	}
	log := o.Logger.With(zap.String("nats", Redacted(o.URL)))
	opts := []nats.Option{nats.Name(o.Name), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS connection lost: hook jobs stay in the local store until it is back", events.Mark(events.FleetLost), zap.Error(err))
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("NATS connection back", events.Mark(events.FleetBack)) }),
	}
	if o.CredentialsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredentialsFile))
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
	}
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &Queue{nc: nc, js: js, opts: o, log: log}, nil
}

// Redacted returns the server URLs without their passwords.
func Redacted(urls string) string {
	u, err := url.Parse(urls)
	if err != nil || u.User == nil {
		return urls
	}
	return u.Redacted()
}

// consumer opens the stream and the workers' consumer once (and again
// after a failure), creating them if they do not exist yet. One that
// exists is changed only where its settings differ from this replica's,
// and only in those settings: a replica that starts does not rewrite what
// an operator set. Replicas starting together each create them with the
// same settings, which JetStream takes as one creation: an update racing
// another replica's consumer creation is what a create-or-update did
// (and what trips a data race inside nats-server 2.15).
func (q *Queue) consumer(ctx context.Context) (jetstream.Consumer, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cons != nil {
		return q.cons, nil
	}
	if err := q.ensureStream(ctx); err != nil {
		return nil, err
	}
	cc := jetstream.ConsumerConfig{Durable: ConsumerName, AckPolicy: jetstream.AckExplicitPolicy, AckWait: q.opts.AckWait,
		MaxDeliver: q.opts.MaxDeliver}
	cons, err := q.js.Consumer(ctx, StreamName, ConsumerName)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cons, err = q.js.CreateConsumer(ctx, StreamName, cc)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			cons, err = q.js.Consumer(ctx, StreamName, ConsumerName)
		}
	}
	if err != nil {
		return nil, err
	}
	if have := cons.CachedInfo().Config; have.AckWait != cc.AckWait || have.MaxDeliver != cc.MaxDeliver {
		have.AckWait, have.MaxDeliver = cc.AckWait, cc.MaxDeliver
		if cons, err = q.js.UpdateConsumer(ctx, StreamName, have); err != nil {
			return nil, err
		}
	}
	q.cons = cons
	return cons, nil
}

// ensureStream creates the jobs' stream, or brings an existing one's
// duplicate window to this replica's, leaving its other settings be.
func (q *Queue) ensureStream(ctx context.Context) error {
	sc := jetstream.StreamConfig{Name: StreamName, Subjects: []string{JobSubject},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute}
	st, err := q.js.Stream(ctx, StreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = q.js.CreateStream(ctx, sc)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = q.js.Stream(ctx, StreamName)
		}
	}
	if err != nil {
		return err
	}
	if have := st.CachedInfo().Config; have.Duplicates != sc.Duplicates {
		have.Duplicates = sc.Duplicates
		_, err = q.js.UpdateStream(ctx, have)
	}
	return err
}

// Publish hands a job to the fleet, and returns once the stream has it;
// a job published twice (a crash between publishing and forgetting it)
// is kept once. While NATS is not connected it fails at once (rather
// than after publishWait): the job stays in the local store.
func (q *Queue) Publish(j jobs.Job) error {
	if !q.nc.IsConnected() {
		return ErrNotConnected
	}
	ctx, cancel := context.WithTimeout(context.Background(), publishWait)
	defer cancel()
	if _, err := q.consumer(ctx); err != nil {
		return err
	}
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	_, err = q.js.Publish(ctx, JobSubject, b, jetstream.WithMsgID(j.ID))
	return err
}

// Delivery is one job as a worker got it.
type Delivery struct {
	Job jobs.Job
	// Attempt counts the deliveries of the job, this one included.
	Attempt int
	msg     jetstream.Msg
}

// Done says the job succeeded: no replica gets it again.
func (d *Delivery) Done() error { return d.msg.Ack() }

// Retry has the job delivered again after the delay, to any replica.
func (d *Delivery) Retry(after time.Duration) error { return d.msg.NakWithDelay(after) }

// GiveUp ends the job: no replica gets it again.
func (d *Delivery) GiveUp() error { return d.msg.TermWithReason("given up") }

// Working tells the stream the job is still being worked on.
func (d *Delivery) Working() error { return d.msg.InProgress() }

// Work hands the fleet's jobs to handle, each on its own goroutine, until
// the returned stop is called; while the stream cannot be reached it tries
// again every few seconds.
func (q *Queue) Work(handle func(*Delivery)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			cc, err := q.startConsuming(ctx, handle)
			if err == nil {
				<-ctx.Done()
				cc.Stop()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second): // NATS not there yet
			}
		}
	}()
	return func() { cancel(); <-done }
}

func (q *Queue) startConsuming(ctx context.Context, handle func(*Delivery)) (jetstream.ConsumeContext, error) {
	wait, cancel := context.WithTimeout(ctx, publishWait)
	defer cancel()
	cons, err := q.consumer(wait)
	if err != nil {
		return nil, err
	}
	return cons.Consume(func(msg jetstream.Msg) {
		d := &Delivery{msg: msg}
		if md, err := msg.Metadata(); err == nil {
			d.Attempt = int(md.NumDelivered)
		}
		if err := json.Unmarshal(msg.Data(), &d.Job); err != nil {
			q.log.Error("a fleet job cannot be read: dropped", zap.Error(err))
			msg.Term()
			return
		}
		go handle(d)
	})
}

// AskCancel asks the fleet to accept a cancel of the session named by key;
// it reports whether a replica did within AskWait. Only the replica that
// holds the request answers: the cancel is accepted once, fleet-wide.
func (q *Queue) AskCancel(key string, cancel []byte) bool {
	msg, err := q.nc.Request(CancelSubject+"."+key, cancel, AskWait)
	return err == nil && string(msg.Data) == string(accepted)
}

// EndSession tells every replica that the client ended the session named
// by key, and waits (AskWait at most) for a replica that held requests of
// it to say it has cancelled them: the cancels go upstream before the
// DELETE does.
func (q *Queue) EndSession(key string) {
	q.nc.Request(EndSubject+"."+key, nil, AskWait) // no answer: no replica held any
}

// ServeCancels hands accept the cancels other replicas ask about, and
// ended the sessions they were told the client ended, until stop; a
// replica answers only when accept or ended reports it held the request or
// the session.
func (q *Queue) ServeCancels(accept func(key string, cancel []byte) bool, ended func(key string) bool) (stop func()) {
	cancels, err := q.nc.Subscribe(CancelSubject+".*", func(m *nats.Msg) {
		if accept(strings.TrimPrefix(m.Subject, CancelSubject+"."), m.Data) {
			m.Respond(accepted)
		}
	})
	if err != nil {
		q.log.Error("cannot serve the fleet's cancels", zap.Error(err))
		return func() {}
	}
	ends, err := q.nc.Subscribe(EndSubject+".*", func(m *nats.Msg) {
		if ended(strings.TrimPrefix(m.Subject, EndSubject+".")) {
			m.Respond(accepted)
		}
	})
	if err != nil {
		q.log.Error("cannot serve the fleet's session ends", zap.Error(err))
		return func() { cancels.Unsubscribe() }
	}
	q.nc.Flush() // the server has both subscriptions when this returns
	return func() { cancels.Unsubscribe(); ends.Unsubscribe() }
}

// PublishAudit publishes one audit line to subject.
func (q *Queue) PublishAudit(subject string, line []byte) error {
	if q.nc.Status() != nats.CONNECTED {
		return ErrNotConnected
	}
	return q.nc.Publish(subject, line)
}

// Close ends the connection.
func (q *Queue) Close() { q.nc.Close() }

// lease returns the slots' lease in force.
func (q *Queue) lease() time.Duration {
	if q.opts.Lease > 0 {
		return q.opts.Lease
	}
	return DefaultLease
}

// MaxDeliver returns the bound on a job's deliveries in force.
func (q *Queue) MaxDeliver() int { return q.opts.MaxDeliver }

// AckWait returns the ack wait in force.
func (q *Queue) AckWait() time.Duration { return q.opts.AckWait }
