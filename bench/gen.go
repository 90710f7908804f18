package bench

import (
	"cmp"
	"container/heap"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// Key formats a Stream can produce.
const (
	// KeysUUID produces UUID-like event ids (36 bytes, version-4 layout).
	KeysUUID = "uuid"
	// KeysComposite produces user/session/sequence ids such as
	// "u0048213/s3f9a01c2-17/42".
	KeysComposite = "composite"
	// KeysMixed alternates the two at random, half each.
	KeysMixed = "mixed"
)

// Delay distributions a Stream can draw redelivery delays from.
const (
	// DelayExponential draws every delay from an exponential distribution
	// with mean DelayOptions.Mean: the window model's ([Reference]).
	DelayExponential = "exp"
	// DelayBimodal draws an immediate retry (exponential with mean
	// RetryMean) or, with probability ReplayShare, a replay hours later
	// (uniform in [ReplayMin, ReplayMax]): the shape real brokers show.
	DelayBimodal = "bimodal"
)

// DelayOptions is the distribution of the delay between an original event
// and each of its duplicates.
type DelayOptions struct {
	// Kind is DelayExponential or DelayBimodal. Default DelayExponential.
	Kind string `json:"kind"`
	// Mean is the exponential mean. Default 2m (the reference's).
	Mean time.Duration `json:"mean"`
	// RetryMean is the mean of the immediate retries of the bimodal
	// mixture. Default 5s.
	RetryMean time.Duration `json:"retry_mean,omitempty"`
	// ReplayShare is the share of duplicates that are replays in the
	// bimodal mixture. Default 0.3.
	ReplayShare float64 `json:"replay_share,omitempty"`
	// ReplayMin and ReplayMax bound the uniform replay delay. Default 1h
	// and 6h.
	ReplayMin time.Duration `json:"replay_min,omitempty"`
	ReplayMax time.Duration `json:"replay_max,omitempty"`
}

// EnsureDefaults fills the zero fields of d with their defaults: the
// one place they are defined (dedupbench takes its flags' defaults
// from it).
func (d *DelayOptions) EnsureDefaults() {
	d.Kind = cmp.Or(d.Kind, DelayExponential)
	d.Mean = cmp.Or(d.Mean, 2*time.Minute)
	d.RetryMean = cmp.Or(d.RetryMean, 5*time.Second)
	d.ReplayShare = cmp.Or(d.ReplayShare, 0.3)
	d.ReplayMin = cmp.Or(d.ReplayMin, time.Hour)
	d.ReplayMax = cmp.Or(d.ReplayMax, 6*time.Hour)
}

// String describes the distribution in a few words.
func (d DelayOptions) String() string {
	if d.Kind == DelayBimodal {
		return fmt.Sprintf("bimodal: %.0f%% retries exp(mean %v), %.0f%% replays U[%v, %v]",
			100*(1-d.ReplayShare), d.RetryMean, 100*d.ReplayShare, d.ReplayMin, d.ReplayMax)
	}
	return fmt.Sprintf("exponential, mean %v", d.Mean)
}

// StreamOptions describes a synthetic clickstream: originals arriving as a
// Poisson process, each followed by duplicates after a random delay.
type StreamOptions struct {
	// Seed makes the stream deterministic. Default 1.
	Seed uint64 `json:"seed"`
	// Rate is the number of arrivals per second of virtual time,
	// duplicates included (the model's "requests"). Default 2000.
	Rate float64 `json:"rate"`
	// DuplicateFraction is the share of arrivals that are duplicates.
	// Default 0.02.
	DuplicateFraction float64 `json:"duplicate_fraction"`
	// Delay is the redelivery-delay distribution.
	Delay DelayOptions `json:"delay"`
	// Keys is KeysUUID, KeysComposite or KeysMixed. Default KeysMixed.
	Keys string `json:"keys"`
	// Duration ends the stream at this virtual time (0: no limit).
	Duration time.Duration `json:"duration,omitempty"`
	// Events ends the stream after this many events (0: no limit). One of
	// Duration and Events must be set.
	Events int64 `json:"events,omitempty"`
}

// EnsureDefaults fills the zero fields of c with their defaults: the
// one place they are defined (dedupbench takes its flags' defaults
// from it).
func (c *StreamOptions) EnsureDefaults() {
	c.Seed = cmp.Or(c.Seed, 1)
	c.Rate = cmp.Or(c.Rate, 2000)
	c.DuplicateFraction = cmp.Or(c.DuplicateFraction, 0.02)
	c.Keys = cmp.Or(c.Keys, KeysMixed)
	c.Delay.EnsureDefaults()
}

// ensureCompareDefaults fills a zero Rate, DuplicateFraction and mean
// delay with the stream Compare and FilterCmd run: 50,000 events/s, 5%
// duplicates after a mean of 1s. EnsureDefaults fills the rest.
func (c *StreamOptions) ensureCompareDefaults() {
	c.Rate = cmp.Or(c.Rate, 50_000)
	c.DuplicateFraction = cmp.Or(c.DuplicateFraction, 0.05)
	c.Delay.Mean = cmp.Or(c.Delay.Mean, time.Second)
}

func (c *StreamOptions) validate() error {
	var errs []error
	if !(c.Rate > 0) {
		errs = append(errs, fmt.Errorf("bench: stream Rate must be positive, got %v", c.Rate))
	}
	if !(c.DuplicateFraction >= 0 && c.DuplicateFraction < 0.95) {
		errs = append(errs, fmt.Errorf("bench: stream DuplicateFraction must be in [0, 0.95), got %v", c.DuplicateFraction))
	}
	switch c.Keys {
	case KeysUUID, KeysComposite, KeysMixed:
	default:
		errs = append(errs, fmt.Errorf("bench: stream Keys must be uuid, composite or mixed, got %q", c.Keys))
	}
	switch c.Delay.Kind {
	case DelayExponential:
		if c.Delay.Mean <= 0 {
			errs = append(errs, fmt.Errorf("bench: delay Mean must be positive, got %v", c.Delay.Mean))
		}
	case DelayBimodal:
		if c.Delay.RetryMean <= 0 || c.Delay.ReplayMin < 0 || c.Delay.ReplayMax < c.Delay.ReplayMin ||
			!(c.Delay.ReplayShare >= 0 && c.Delay.ReplayShare <= 1) {
			errs = append(errs, fmt.Errorf("bench: bimodal delay needs RetryMean > 0, 0 <= ReplayMin <= ReplayMax, ReplayShare in [0, 1]; got %+v", c.Delay))
		}
	default:
		errs = append(errs, fmt.Errorf("bench: delay Kind must be exp or bimodal, got %q", c.Delay.Kind))
	}
	if c.Duration <= 0 && c.Events <= 0 {
		errs = append(errs, errors.New("bench: stream needs a Duration or an Events count"))
	}
	return errors.Join(errs...)
}

// DistinctRate is the rate of original (first-time) keys per second: the
// key insert rate of a dedup store.
func (c StreamOptions) DistinctRate() float64 { return c.Rate * (1 - c.DuplicateFraction) }

// Event is one arrival of a Stream, with its ground truth.
type Event struct {
	// At is the virtual time of the arrival since the stream's start.
	At time.Duration
	// Key is the event's id. Duplicates share the original's slice: do not
	// modify it.
	Key []byte
	// Dup reports that Key arrived before (ground truth).
	Dup bool
	// Delay is, for a duplicate, the time since its original arrived.
	Delay time.Duration
	// Replay marks a duplicate drawn from the replay mode of a bimodal
	// delay.
	Replay bool
}

// Stream generates a deterministic clickstream. It is not safe for
// concurrent use.
type Stream struct {
	cfg     StreamOptions
	rng     *rand.Rand
	next    time.Duration // arrival time of the next original
	gap     float64       // mean gap between originals, in ns
	dupsPer float64       // expected duplicates per original
	pending dupHeap
	seq     uint64
	emitted int64

	sessions []session
	sessSeq  uint64
}

type session struct {
	prefix []byte
	seq    uint64
}

// NewStream returns the stream cfg describes.
func NewStream(cfg StreamOptions) (*Stream, error) {
	cfg.EnsureDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Stream{
		cfg:     cfg,
		rng:     rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15)),
		gap:     1e9 / cfg.DistinctRate(),
		dupsPer: cfg.DuplicateFraction / (1 - cfg.DuplicateFraction),
	}
	s.sessions = make([]session, 4096)
	for i := range s.sessions {
		s.newSession(i)
	}
	s.next = s.expGap()
	return s, nil
}

func (s *Stream) expGap() time.Duration {
	return time.Duration(s.rng.ExpFloat64() * s.gap)
}

// Next fills ev with the next arrival and reports false at the end of the
// stream.
func (s *Stream) Next(ev *Event) bool {
	if s.cfg.Events > 0 && s.emitted >= s.cfg.Events {
		return false
	}
	if len(s.pending) > 0 && s.pending[0].at <= s.next {
		d := heap.Pop(&s.pending).(pendingDup)
		if s.cfg.Duration > 0 && d.at >= s.cfg.Duration {
			return false
		}
		*ev = Event{At: d.at, Key: d.key, Dup: true, Delay: d.delay, Replay: d.replay}
		s.emitted++
		return true
	}
	at := s.next
	if s.cfg.Duration > 0 && at >= s.cfg.Duration {
		return false
	}
	s.next += s.expGap()
	key := s.newKey()
	n := int(s.dupsPer)
	if s.rng.Float64() < s.dupsPer-float64(n) {
		n++
	}
	for range n {
		delay, replay := s.delay()
		s.seq++
		heap.Push(&s.pending, pendingDup{at: at + delay, seq: s.seq, key: key, delay: delay, replay: replay})
	}
	*ev = Event{At: at, Key: key}
	s.emitted++
	return true
}

// delay draws one redelivery delay.
func (s *Stream) delay() (time.Duration, bool) {
	d := s.cfg.Delay
	if d.Kind == DelayBimodal {
		if s.rng.Float64() < d.ReplayShare {
			span := float64(d.ReplayMax - d.ReplayMin)
			return d.ReplayMin + time.Duration(s.rng.Float64()*span), true
		}
		return time.Duration(s.rng.ExpFloat64() * float64(d.RetryMean)), false
	}
	return time.Duration(s.rng.ExpFloat64() * float64(d.Mean)), false
}

func (s *Stream) newKey() []byte {
	switch s.cfg.Keys {
	case KeysUUID:
		return s.uuid()
	case KeysComposite:
		return s.composite()
	}
	if s.rng.Uint64()&1 == 0 {
		return s.uuid()
	}
	return s.composite()
}

// uuid returns a random version-4 UUID in its 36-byte text form.
func (s *Stream) uuid() []byte {
	var b [16]byte
	hi, lo := s.rng.Uint64(), s.rng.Uint64()
	for i := range 8 {
		b[i] = byte(hi >> (8 * i))
		b[8+i] = byte(lo >> (8 * i))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	out := make([]byte, 36)
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:36], b[10:16])
	return out
}

// composite returns "u<user>/s<session>/<seq>" from one of a pool of active
// sessions, which end (and are replaced by a new user's) now and then.
func (s *Stream) composite() []byte {
	i := s.rng.IntN(len(s.sessions))
	if s.rng.IntN(64) == 0 {
		s.newSession(i)
	}
	ss := &s.sessions[i]
	ss.seq++
	out := make([]byte, 0, len(ss.prefix)+8)
	out = append(out, ss.prefix...)
	return strconv.AppendUint(out, ss.seq, 10)
}

func (s *Stream) newSession(i int) {
	s.sessSeq++
	user := s.rng.IntN(5_000_000)
	p := fmt.Appendf(nil, "u%07d/s%08x-%d/", user, s.rng.Uint32(), s.sessSeq)
	s.sessions[i] = session{prefix: p}
}

type pendingDup struct {
	at     time.Duration
	seq    uint64
	key    []byte
	delay  time.Duration
	replay bool
}

type dupHeap []pendingDup

func (h dupHeap) Len() int { return len(h) }
func (h dupHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h dupHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dupHeap) Push(x any)   { *h = append(*h, x.(pendingDup)) }
func (h *dupHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// expQuantile returns the q-quantile of an exponential distribution with
// the given mean.
func expQuantile(mean time.Duration, q float64) time.Duration {
	return time.Duration(-float64(mean) * math.Log(1-q))
}
