package assets

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Names of the assets (DESIGN.md, "NATS resources").
const (
	StreamRuns     = "CAIRN_RUNS"
	StreamSteps    = "CAIRN_STEPS"
	StreamSaga     = "CAIRN_SAGA"
	StreamOutbox   = "CAIRN_OUTBOX"
	StreamAudit    = "CAIRN_AUDIT"
	StreamRejected = "CAIRN_REJECTED"

	BucketRuns      = "cairn-runs"
	BucketMemo      = "cairn-memo"
	BucketHandovers = "cairn-handovers"
	BucketOutbox    = "cairn-outbox-sent"
	// BucketNaturalKeys claims each run's input for one run id (see package supervisor).
	BucketNaturalKeys = "cairn-natural-keys"
	// BucketLimits keeps the declared rate limits of outside systems, one key each, shared
	// by every instance (see package ratelimit).
	BucketLimits    = "cairn-limits"
	ObjectArtifacts = "cairn-artifacts"
	// BucketKeys holds the services' and approvers' public keys and the seal (package
	// identity); only admin writes it.
	BucketKeys = "cairn-keys"

	ConsumerControl     = "control"
	ConsumerCompensator = "compensator"
	ConsumerOutbox      = "outbox-sender"

	EpochKey = "cairn.epoch"
)

// Retention limits of the streams that only record (the audit timeline and the refusals):
// past any of them the oldest messages go (DiscardOld). The other limits streams keep what
// recovery needs (saga intents, outbox messages) and are bounded by their consumers and
// their runs, not by age.
const (
	AuditMaxAge      = 90 * 24 * time.Hour
	AuditMaxBytes    = 1 << 30 // 1 GiB
	AuditMaxMsgs     = 5_000_000
	RejectedMaxAge   = 30 * 24 * time.Hour
	RejectedMaxBytes = 64 << 20 // 64 MiB; a rejection keeps at most 4 KiB of its body
	RejectedMaxMsgs  = 100_000
)

// ErrMismatch: an existing asset differs from its definition.
var ErrMismatch = errors.New("asset differs from its definition")

// ErrReservedName: a pipeline's name is taken by a name of the NATS account it would meet
// (a service's, a reply prefix, a word of the default space).
var ErrReservedName = errors.New("reserved pipeline name")

// ErrMissing: an asset a service needs does not exist (run cairn init).
var ErrMissing = errors.New("asset missing")

// Config says how the assets are made.
type Config struct {
	Space      Space         // whose assets; the zero Space is the reference night's
	Replicas   int           // default 1
	Steps      []string      // the pipeline's step names: one durable each on CAIRN_STEPS
	AckWait    time.Duration // step consumers' ack wait; default 30s
	MaxDeliver int           // step consumers' safety net; default 20
	Limits     Limits        // the assets' sizes; zero fields: the defaults
}

func (c Config) withDefaults() Config {
	c.Replicas = cmp.Or(c.Replicas, 1)
	c.AckWait = cmp.Or(c.AckWait, 30*time.Second)
	c.MaxDeliver = cmp.Or(c.MaxDeliver, 20)
	c.Limits = c.Limits.withDefaults()
	return c
}

func (c Config) validate() error {
	if c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5 {
		return fmt.Errorf("replicas must be 1, 3 or 5, not %d", c.Replicas)
	}
	if len(c.Steps) == 0 {
		return errors.New("the pipeline has no steps")
	}
	return c.Limits.Validate()
}

// Streams returns the stream definitions.
func (c Config) Streams() []jetstream.StreamConfig {
	c = c.withDefaults()
	async := jetstream.DefaultPersistMode
	if c.Replicas == 1 {
		async = jetstream.AsyncPersistMode
	}
	st := func(name string, subjects []string, ret jetstream.RetentionPolicy, pm jetstream.PersistModeType) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name: name, Subjects: subjects, Retention: ret, Storage: jetstream.FileStorage,
			Replicas: c.Replicas, Discard: jetstream.DiscardOld, Duplicates: 2 * time.Minute, PersistMode: pm,
		}
	}
	sp, l := c.Space, c.Limits
	return []jetstream.StreamConfig{
		// What recovery needs is never dropped: past its size a stream refuses the publish
		// (DiscardNew), and has no age limit, which could take an intent an undo still needs.
		kept(st(sp.Stream(StreamRuns), []string{sp.RunStart(), sp.RunsPrefix() + "*.*"}, jetstream.WorkQueuePolicy, jetstream.DefaultPersistMode), l.Queues, MaxEventSize),
		kept(st(sp.Stream(StreamSteps), []string{sp.StepPrefix() + "*.*"}, jetstream.WorkQueuePolicy, async), l.Queues, MaxEventSize),
		kept(st(sp.Stream(StreamSaga), []string{sp.Root() + "saga.>"}, jetstream.LimitsPolicy, jetstream.DefaultPersistMode), l.Saga, MaxSagaMsgSize),
		kept(st(sp.Stream(StreamOutbox), []string{sp.Root() + "outbox.>"}, jetstream.LimitsPolicy, jetstream.DefaultPersistMode), l.Outbox, MaxOutboxSize),
		// The timeline counts paid calls and document loads across crashes; under cairn dev the
		// server dies with the process, so audit writes are persisted before they are acked.
		limited(st(sp.Stream(StreamAudit), []string{sp.Root() + "audit.>"}, jetstream.LimitsPolicy, jetstream.DefaultPersistMode), AuditMaxAge, AuditMaxBytes, AuditMaxMsgs),
		limited(st(sp.Stream(StreamRejected), []string{sp.Rejected()}, jetstream.LimitsPolicy, jetstream.DefaultPersistMode), RejectedMaxAge, RejectedMaxBytes, RejectedMaxMsgs),
	}
}

func limited(c jetstream.StreamConfig, age time.Duration, bytes, msgs int64) jetstream.StreamConfig {
	c.MaxAge, c.MaxBytes, c.MaxMsgs = age, bytes, msgs
	return c
}

// kept bounds a stream whose messages must not be lost: at most bytes, each message at most
// size, a publish past them refused.
func kept(c jetstream.StreamConfig, bytes int64, size int32) jetstream.StreamConfig {
	c.MaxBytes, c.MaxMsgSize, c.Discard = bytes, size, jetstream.DiscardNew
	return c
}

// Consumer is a durable consumer definition on a stream.
type Consumer struct {
	Stream string
	Config jetstream.ConsumerConfig
}

// Consumers returns the durable consumer definitions.
func (c Config) Consumers() []Consumer {
	c = c.withDefaults()
	durable := func(stream, name string, filters ...string) Consumer {
		cc := jetstream.ConsumerConfig{
			Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: c.AckWait,
			MaxDeliver: c.MaxDeliver, DeliverPolicy: jetstream.DeliverAllPolicy, Replicas: c.Replicas,
			MaxAckPending: 1000,
		}
		if len(filters) == 1 {
			cc.FilterSubject = filters[0]
		} else {
			cc.FilterSubjects = filters
		}
		return Consumer{Stream: stream, Config: cc}
	}
	// The outbox sender never gives a message up: it retries a temporary failure for as long
	// as it lasts (a relay down for an hour) and settles a permanent one itself, so its
	// durable has no delivery limit (-1) for the server to drop a message at.
	sp := c.Space
	outboxSender := durable(sp.Stream(StreamOutbox), ConsumerOutbox, sp.Root()+"outbox.>")
	outboxSender.Config.MaxDeliver = -1
	runs := sp.RunsPrefix() + "*."
	out := []Consumer{
		durable(sp.Stream(StreamRuns), ConsumerControl, sp.RunStart(), runs+"resume", runs+"approve",
			runs+"reject", runs+"cancel", runs+"rerun"),
		durable(sp.Stream(StreamRuns), ConsumerCompensator, runs+"undo"),
		outboxSender,
	}
	for _, s := range c.Steps {
		out = append(out, durable(sp.Stream(StreamSteps), s, sp.StepPrefix()+s+".*"))
	}
	return out
}

// Buckets returns the key-value bucket definitions (without the epoch).
func (c Config) Buckets() []jetstream.KeyValueConfig {
	c = c.withDefaults()
	// A bucket discards new writes (the client's default): a full one refuses the write.
	kv := func(name string, history uint8, bytes int64, value int32) jetstream.KeyValueConfig {
		return jetstream.KeyValueConfig{Bucket: name, History: history, Storage: jetstream.FileStorage, Replicas: c.Replicas,
			MaxBytes: bytes, MaxValueSize: value}
	}
	b := c.Limits.Buckets
	return []jetstream.KeyValueConfig{
		kv(c.Space.Bucket(BucketRuns), 16, c.Limits.Runs, MaxRecordSize),
		kv(c.Space.Bucket(BucketMemo), 1, c.Limits.Memo, MaxMemoSize),
		kv(c.Space.Bucket(BucketHandovers), 8, b, MaxValueSize),
		kv(c.Space.Bucket(BucketOutbox), 4, b, MaxValueSize),
		kv(c.Space.Bucket(BucketNaturalKeys), 4, b, MaxValueSize),
		kv(c.Space.Bucket(BucketLimits), 1, b, MaxValueSize),
		kv(c.Space.Bucket(BucketKeys), 4, b, MaxValueSize),
	}
}

// ObjectStore returns the artifact store definition.
func (c Config) ObjectStore() jetstream.ObjectStoreConfig {
	c = c.withDefaults()
	return jetstream.ObjectStoreConfig{Bucket: c.Space.Bucket(ObjectArtifacts), Storage: jetstream.FileStorage, Replicas: c.Replicas, MaxBytes: c.Limits.Artifacts}
}

// Ensure creates every missing asset and checks every existing one. The changes it makes
// to an existing asset are to lift a delivery limit the definition no longer has (the
// outbox sender's, made by an earlier release) and to set the size limits of a stream, a
// bucket or the object store to its definition's (Limits); EnsureReport names each such
// change.
func Ensure(ctx context.Context, js jetstream.JetStream, c Config) error {
	_, err := EnsureReport(ctx, js, c)
	return err
}

// EnsureReport is Ensure, and returns one sentence per consumer or stream it updated.
func EnsureReport(ctx context.Context, js jetstream.JetStream, c Config) ([]string, error) {
	var changed []string
	err := apply(ctx, js, c, true, &changed)
	return changed, err
}

// Check looks every asset up and compares it with its definition; it creates nothing.
func Check(ctx context.Context, js jetstream.JetStream, c Config) error {
	return apply(ctx, js, c, false, nil)
}

func apply(ctx context.Context, js jetstream.JetStream, c Config, create bool, changed *[]string) error {
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return fmt.Errorf("asset configuration: %w", err)
	}
	if _, err := js.AccountInfo(ctx); ctx.Err() != nil {
		return fmt.Errorf("asking the NATS server for its JetStream account: %w", ctx.Err())
	} else if err != nil {
		return fmt.Errorf("the NATS server offers no JetStream: %w", err)
	}
	var errs []error
	for _, want := range c.Streams() {
		errs = append(errs, ensureStream(ctx, js, want, c.setting(want.Name), create, changed))
	}
	for _, want := range c.Buckets() {
		errs = append(errs, ensureBucket(ctx, js, want, want.Bucket == c.Space.Bucket(BucketRuns), c.setting(want.Bucket), create, changed))
	}
	errs = append(errs, ensureObjectStore(ctx, js, c.ObjectStore(), create, changed))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, want := range c.Consumers() {
		errs = append(errs, ensureConsumer(ctx, js, want, create, changed))
	}
	return errors.Join(errs...)
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, setting string, create bool, changed *[]string) error {
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if !create {
			return fmt.Errorf("stream %s: %w", want.Name, ErrMissing)
		}
		if _, err := js.CreateStream(ctx, want); err != nil {
			return fmt.Errorf("creating stream %s: %w", want.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up stream %s: %w", want.Name, err)
	}
	got := s.CachedInfo().Config
	if err := compareStream(got, want); err != nil || !create {
		return err
	}
	return ensureLimits(ctx, js, "stream "+want.Name, s.CachedInfo(), want, setting, changed)
}

// ensureLimits sets the limits of a stream (a bucket's or an object store's included:
// MaxAge, MaxBytes, MaxMsgs, MaxMsgSize, Discard) to want's, in place: the server keeps the
// stream's messages and its consumers' positions. Only Ensure (cairn init, cairn dev) does
// it; Check, which every service runs at its start, does not refuse other limits (an
// operator's, or an earlier release's). A stream that discards new writes and already holds
// more than its new limit is not changed (it would refuse every write at once): the error
// names the setting to raise.
func ensureLimits(ctx context.Context, js jetstream.JetStream, asset string, info *jetstream.StreamInfo, want jetstream.StreamConfig, setting string, changed *[]string) error {
	unlimited := func(n int64) int64 { // the server keeps 0 as -1: both are no limit
		if n <= 0 {
			return -1
		}
		return n
	}
	got := info.Config
	if got.MaxAge == want.MaxAge && unlimited(got.MaxBytes) == unlimited(want.MaxBytes) && unlimited(got.MaxMsgs) == unlimited(want.MaxMsgs) &&
		unlimited(int64(got.MaxMsgSize)) == unlimited(int64(want.MaxMsgSize)) && got.Discard == want.Discard {
		return nil
	}
	if want.Discard == jetstream.DiscardNew && want.MaxBytes > 0 && info.State.Bytes >= uint64(want.MaxBytes) {
		return fmt.Errorf("%s holds %d bytes, not less than its limit of %d: raise %s and run cairn init again: %w", asset, info.State.Bytes, want.MaxBytes, setting, ErrMismatch)
	}
	upd := got
	upd.MaxAge, upd.MaxBytes, upd.MaxMsgs, upd.MaxMsgSize, upd.Discard = want.MaxAge, want.MaxBytes, want.MaxMsgs, want.MaxMsgSize, want.Discard
	if _, err := js.UpdateStream(ctx, upd); err != nil {
		return fmt.Errorf("updating the limits of %s: %w", asset, err)
	}
	if changed != nil {
		*changed = append(*changed, fmt.Sprintf("%s: max age %v, max bytes %d, max messages %d, max message size %d, discard %v; was %v, %d, %d, %d, %v",
			asset, want.MaxAge, want.MaxBytes, want.MaxMsgs, want.MaxMsgSize, want.Discard, got.MaxAge, got.MaxBytes, got.MaxMsgs, got.MaxMsgSize, got.Discard))
	}
	return nil
}

// setting is the cairn init setting of the size of asset (a stream's, a bucket's or the
// object store's name).
func (c Config) setting(asset string) string {
	sp := c.Space
	switch asset {
	case sp.Stream(StreamRuns), sp.Stream(StreamSteps):
		return "CAIRN_MAX_QUEUE_BYTES (Limits.Queues)"
	case sp.Stream(StreamSaga):
		return "CAIRN_MAX_SAGA_BYTES (Limits.Saga)"
	case sp.Stream(StreamOutbox):
		return "CAIRN_MAX_OUTBOX_BYTES (Limits.Outbox)"
	case sp.Bucket(BucketRuns):
		return "CAIRN_MAX_RUNS_BYTES (Limits.Runs)"
	case sp.Bucket(BucketMemo):
		return "CAIRN_MAX_MEMO_BYTES (Limits.Memo)"
	case sp.Bucket(ObjectArtifacts):
		return "CAIRN_MAX_ARTIFACT_BYTES (Limits.Artifacts)"
	case sp.Stream(StreamAudit), sp.Stream(StreamRejected):
		return "its retention"
	}
	return "CAIRN_MAX_BUCKET_BYTES (Limits.Buckets)"
}

func compareStream(got, want jetstream.StreamConfig) error {
	var diffs []error
	diff := func(field string, g, w any) {
		diffs = append(diffs, fmt.Errorf("stream %s: %s is %v, want %v: %w", want.Name, field, g, w, ErrMismatch))
	}
	if !slices.Equal(got.Subjects, want.Subjects) {
		diff("subjects", got.Subjects, want.Subjects)
	}
	if got.Retention != want.Retention {
		diff("retention", got.Retention, want.Retention)
	}
	if got.Storage != want.Storage {
		diff("storage", got.Storage, want.Storage)
	}
	if got.Replicas != want.Replicas {
		diffs = append(diffs, replicasDiff("stream "+want.Name, got.Replicas, want.Replicas))
	}
	if got.PersistMode != want.PersistMode {
		diff("persist mode", got.PersistMode, want.PersistMode)
	}
	return errors.Join(diffs...)
}

// ensureBucket: epoch, whether the bucket is the runs' (whose metadata holds the epoch).
func ensureBucket(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig, epoch bool, setting string, create bool, changed *[]string) error {
	_, err := js.KeyValue(ctx, want.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		if !create {
			return fmt.Errorf("bucket %s: %w", want.Bucket, ErrMissing)
		}
		if epoch {
			want.Metadata = map[string]string{EpochKey: newEpoch()}
		}
		if _, err := js.CreateKeyValue(ctx, want); err != nil {
			return fmt.Errorf("creating bucket %s: %w", want.Bucket, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up bucket %s: %w", want.Bucket, err)
	}
	s, err := js.Stream(ctx, "KV_"+want.Bucket)
	if err != nil {
		return fmt.Errorf("looking up bucket %s: %w", want.Bucket, err)
	}
	got := s.CachedInfo().Config
	var diffs []error
	if got.Replicas != want.Replicas {
		diffs = append(diffs, replicasDiff("bucket "+want.Bucket, got.Replicas, want.Replicas))
	}
	if got.Storage != want.Storage {
		diffs = append(diffs, fmt.Errorf("bucket %s: storage is %v, want %v: %w", want.Bucket, got.Storage, want.Storage, ErrMismatch))
	}
	if int64(want.History) != got.MaxMsgsPerSubject {
		diffs = append(diffs, fmt.Errorf("bucket %s: history is %d, want %d: %w", want.Bucket, got.MaxMsgsPerSubject, want.History, ErrMismatch))
	}
	if epoch && got.Metadata[EpochKey] == "" {
		diffs = append(diffs, fmt.Errorf("bucket %s: no %s in its metadata: %w", want.Bucket, EpochKey, ErrMismatch))
	}
	if len(diffs) > 0 || !create {
		return errors.Join(diffs...)
	}
	limits := got
	limits.MaxBytes, limits.MaxMsgSize, limits.Discard = want.MaxBytes, want.MaxValueSize, jetstream.DiscardNew
	return ensureLimits(ctx, js, "bucket "+want.Bucket, s.CachedInfo(), limits, setting, changed)
}

func ensureObjectStore(ctx context.Context, js jetstream.JetStream, want jetstream.ObjectStoreConfig, create bool, changed *[]string) error {
	_, err := js.ObjectStore(ctx, want.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		if !create {
			return fmt.Errorf("object store %s: %w", want.Bucket, ErrMissing)
		}
		if _, err := js.CreateObjectStore(ctx, want); err != nil {
			return fmt.Errorf("creating object store %s: %w", want.Bucket, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up object store %s: %w", want.Bucket, err)
	}
	s, err := js.Stream(ctx, "OBJ_"+want.Bucket)
	if err != nil {
		return fmt.Errorf("looking up object store %s: %w", want.Bucket, err)
	}
	got := s.CachedInfo().Config
	var diffs []error
	if got.Replicas != want.Replicas {
		diffs = append(diffs, replicasDiff("object store "+want.Bucket, got.Replicas, want.Replicas))
	}
	if got.Storage != want.Storage {
		diffs = append(diffs, fmt.Errorf("object store %s: storage is %v, want %v: %w", want.Bucket, got.Storage, want.Storage, ErrMismatch))
	}
	if len(diffs) > 0 || !create {
		return errors.Join(diffs...)
	}
	limits := got
	limits.MaxBytes, limits.Discard = want.MaxBytes, jetstream.DiscardNew
	return ensureLimits(ctx, js, "object store "+want.Bucket, s.CachedInfo(), limits, "CAIRN_MAX_ARTIFACT_BYTES (Limits.Artifacts)", changed)
}

func ensureConsumer(ctx context.Context, js jetstream.JetStream, want Consumer, create bool, changed *[]string) error {
	name := want.Config.Durable
	c, err := js.Consumer(ctx, want.Stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		if !create {
			return fmt.Errorf("consumer %s on %s: %w", name, want.Stream, ErrMissing)
		}
		if _, err := js.CreateConsumer(ctx, want.Stream, want.Config); err != nil {
			return fmt.Errorf("creating consumer %s on %s: %w", name, want.Stream, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up consumer %s on %s: %w", name, want.Stream, err)
	}
	if reset, err := resetIfAhead(ctx, js, want, c.CachedInfo(), create, changed); reset || err != nil {
		return err
	}
	got := c.CachedInfo().Config
	var diffs []error
	diff := func(field string, g, w any) {
		diffs = append(diffs, fmt.Errorf("consumer %s on %s: %s is %v, want %v: %w", name, want.Stream, field, g, w, ErrMismatch))
	}
	if got.FilterSubject != want.Config.FilterSubject || !slices.Equal(got.FilterSubjects, want.Config.FilterSubjects) {
		diff("filter", append([]string{got.FilterSubject}, got.FilterSubjects...), append([]string{want.Config.FilterSubject}, want.Config.FilterSubjects...))
	}
	if got.AckPolicy != want.Config.AckPolicy {
		diff("ack policy", got.AckPolicy, want.Config.AckPolicy)
	}
	if len(got.BackOff) > 0 {
		diff("backoff", got.BackOff, "none")
	}
	if got.Replicas != want.Config.Replicas {
		diffs = append(diffs, replicasDiff("consumer "+name+" on "+want.Stream, got.Replicas, want.Config.Replicas))
	}
	if got.AckWait != want.Config.AckWait {
		diff("ack wait", got.AckWait, want.Config.AckWait)
	}
	if got.MaxDeliver == want.Config.MaxDeliver {
		return errors.Join(diffs...)
	}
	limit := fmt.Errorf("consumer %s on %s: max deliver is %d, want %d: %w", name, want.Stream, got.MaxDeliver, want.Config.MaxDeliver, ErrMismatch)
	// A delivery limit this release removed (the outbox sender's) is lifted in place by
	// Ensure: the server keeps the consumer's position and pending acks, and no message can
	// be lost by it. Any other limit is the operator's setting (CAIRN_MAX_DELIVER): reported.
	if len(diffs) > 0 || !create || want.Config.MaxDeliver != -1 {
		return errors.Join(append(diffs, limit)...)
	}
	upd := got
	upd.MaxDeliver = want.Config.MaxDeliver
	if _, err := js.UpdateConsumer(ctx, want.Stream, upd); err != nil {
		return fmt.Errorf("updating consumer %s on %s: %w", name, want.Stream, errors.Join(limit, err))
	}
	if changed != nil {
		*changed = append(*changed, fmt.Sprintf("consumer %s on %s: max deliver %d (no limit), was %d", name, want.Stream, upd.MaxDeliver, got.MaxDeliver))
	}
	return nil
}

// replicasDiff reports an asset's replicas that differ from CAIRN_REPLICAS. The server could
// move an asset to other replicas, but Cairn never does it behind the operator's back: it
// changes where the data lives and how much of it survives a lost node.
func replicasDiff(asset string, got, want int) error {
	return fmt.Errorf("%s: replicas is %d, want %d (CAIRN_REPLICAS): %w", asset, got, want, ErrMismatch)
}

func newEpoch() string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("assets: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// resetIfAhead resets a consumer that has delivered beyond its stream's last message: a
// server killed before it wrote its latest messages kept the consumer's state of them (a
// delivery is recorded apart from the message), and such a consumer delivers no message the
// stream stores under those sequences again, a step's event republished after the crash
// included, so its runs would wait until their stall timeout. Ensure deletes it and creates
// it again as defined: every message its stream still holds is delivered again from the first
// (a step's runner acks one whose step is done, after reading the record). Check reports it.
func resetIfAhead(ctx context.Context, js jetstream.JetStream, want Consumer, info *jetstream.ConsumerInfo, create bool, changed *[]string) (bool, error) {
	name := want.Config.Durable
	s, err := js.Stream(ctx, want.Stream)
	if err != nil {
		return false, fmt.Errorf("looking up stream %s: %w", want.Stream, err)
	}
	last := s.CachedInfo().State.LastSeq
	if info.Delivered.Stream <= last {
		return false, nil
	}
	ahead := fmt.Errorf("consumer %s on %s has delivered up to stream sequence %d, beyond the stream's last %d: the server lost its latest messages in a crash and kept the consumer's state of them, so the consumer would skip what the stream stores under those sequences again (run cairn init to reset it): %w",
		name, want.Stream, info.Delivered.Stream, last, ErrMismatch)
	if !create {
		return true, ahead
	}
	if err := js.DeleteConsumer(ctx, want.Stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return true, fmt.Errorf("resetting consumer %s on %s: %w", name, want.Stream, errors.Join(ahead, err))
	}
	if _, err := js.CreateConsumer(ctx, want.Stream, want.Config); err != nil {
		return true, fmt.Errorf("resetting consumer %s on %s: %w", name, want.Stream, errors.Join(ahead, err))
	}
	if changed != nil {
		*changed = append(*changed, fmt.Sprintf("consumer %s on %s reset: it had delivered up to stream sequence %d, beyond the stream's last %d (messages lost in a server crash); the %d messages the stream holds are delivered again",
			name, want.Stream, info.Delivered.Stream, last, s.CachedInfo().State.Msgs))
	}
	return true, nil
}
