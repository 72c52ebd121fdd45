package fleet

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// SlotsBucket is the key-value bucket of the fleet's slots.
const SlotsBucket = "MCP_CANCEL_PROXY_SLOTS"

// DefaultLease is how long a slot stays held after its holder last said
// so: a replica that dies frees its slots after this long.
const DefaultLease = 30 * time.Second

// Semaphore counts, fleet-wide, the slots of one name (a rule's
// max_concurrent): each slot is a key of the bucket, taken by creating it
// (compare-and-set: only one replica can), kept by its holder rewriting it
// every third of the lease, and freed by deleting it, or by the bucket's
// age limit when its holder died.
type Semaphore struct {
	q      *Queue
	prefix string
	n      int
	owner  string

	mu      sync.Mutex // guards kv
	kv      jetstream.KeyValue
	changed chan struct{}
}

// Semaphore returns the fleet-wide semaphore of n slots named name.
func (q *Queue) Semaphore(name string, n int) *Semaphore {
	sum := sha256.Sum256([]byte(name))
	b := make([]byte, 8)
	rand.Read(b)
	return &Semaphore{q: q, prefix: "slot." + hex.EncodeToString(sum[:8]), n: n, owner: hex.EncodeToString(b),
		changed: make(chan struct{}, 1)}
}

// bucket opens the bucket once (and again after a failure).
func (s *Semaphore) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv != nil {
		return s.kv, nil
	}
	kv, err := s.q.js.KeyValue(ctx, SlotsBucket) // as the fleet has it: not rewritten on every start
	if err == nil {
		if st, serr := kv.Status(ctx); serr != nil || st.TTL() != s.q.lease() {
			err = errors.New("the bucket's lease differs") // this replica's setting wins
		}
	}
	if err != nil {
		kv, err = s.q.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: SlotsBucket, TTL: s.q.lease(),
			Storage: jetstream.FileStorage})
	}
	if err != nil {
		return nil, err
	}
	s.kv = kv
	return kv, nil
}

// TryAcquire takes a free slot and returns the function that frees it, or
// reports false if every slot is held (or NATS cannot be reached).
func (s *Semaphore) TryAcquire() (release func(), ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), publishWait)
	defer cancel()
	kv, err := s.bucket(ctx)
	if err != nil {
		s.q.log.Warn("fleet slots cannot be reached: requests wait", zap.Error(err))
		return nil, false
	}
	for i := range s.n {
		key := fmt.Sprintf("%s.%d", s.prefix, i)
		rev, err := kv.Create(ctx, key, []byte(s.owner))
		if err != nil {
			continue // held (or gone wrong: another slot may do)
		}
		return s.hold(kv, key, rev), true
	}
	return nil, false
}

// hold keeps a slot until the returned function frees it.
func (s *Semaphore) hold(kv jetstream.KeyValue, key string, rev uint64) func() {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(s.q.lease() / 3)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				ctx, cancel := context.WithTimeout(context.Background(), publishWait)
				if r, err := kv.Update(ctx, key, []byte(s.owner), rev); err == nil {
					rev = r
				}
				cancel()
			case <-stop:
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			<-done
			ctx, cancel := context.WithTimeout(context.Background(), publishWait)
			defer cancel()
			kv.Delete(ctx, key, jetstream.LastRevision(rev))
			s.signal()
		})
	}
}

func (s *Semaphore) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Changed is signalled when this replica freed a slot; slots freed by
// other replicas are seen by looking again (every third of the lease).
func (s *Semaphore) Changed() <-chan struct{} { return s.changed }

// Recheck is how often a replica with requests waiting looks for slots
// that other replicas freed.
func (s *Semaphore) Recheck() time.Duration { return min(s.q.lease()/3, time.Second) }
