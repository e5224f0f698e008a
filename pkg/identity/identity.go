package identity

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/cairnhq/cairn/pkg/assets"
)

// Bucket is the KV bucket of the registered public keys, written by admin only.
const Bucket = assets.BucketKeys

// Key names in Bucket.
const (
	servicePrefix  = "service."
	approverPrefix = "approver."
	// SealKey holds the Seal.
	SealKey = "seal"
)

// Domains of what is signed.
const (
	DomainRecord  = "cairn.record.v1"
	DomainSaga    = "cairn.saga.v1"
	DomainOutbox  = "cairn.outbox.v1"
	DomainApprove = "cairn.approve.v1"
	// DomainHTTP: a request to an outside system's HTTP API (package httpidem).
	DomainHTTP = "cairn.http.v1"
)

// Sig is a signature as a value carries it: who signed, optionally with which public key
// (checked against the registered one when present), and the signature (unpadded standard
// base64).
type Sig struct {
	By  string `json:"by"`
	Key string `json:"key,omitempty"`
	Sig string `json:"sig"`
}

// Signer signs as one service (or one approver).
type Signer struct {
	name string
	key  ed25519.PrivateKey // the seed's, derived once: nkeys derives it at every Sign
	pub  string
}

// NewSigner returns the signer of name from its seed (an nkey seed, "S…").
func NewSigner(name, seed string) (*Signer, error) {
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		return nil, fmt.Errorf("%w: the seed of %s: %v", ErrBadSeed, name, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("%w: the seed of %s: %v", ErrBadSeed, name, err)
	}
	_, raw, err := nkeys.DecodeSeed([]byte(seed))
	if err != nil || len(raw) != ed25519.SeedSize {
		return nil, fmt.Errorf("%w: the seed of %s: %v", ErrBadSeed, name, err)
	}
	return &Signer{name: name, key: ed25519.NewKeyFromSeed(raw), pub: pub}, nil
}

// NewSeed makes a new seed (a user nkey's).
func NewSeed() (string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", err
	}
	seed, err := kp.Seed()
	return string(seed), err
}

// PublicKeyOf is the public key of seed.
func PublicKeyOf(seed string) (string, error) {
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadSeed, err)
	}
	return kp.PublicKey()
}

// Name is who the signer signs as.
func (s *Signer) Name() string { return s.name }

// PublicKey is the signer's public key.
func (s *Signer) PublicKey() string { return s.pub }

// Sign signs msg in domain.
func (s *Signer) Sign(domain string, msg []byte) Sig {
	b := ed25519.Sign(s.key, signed(domain, msg)) // what nkeys' Sign makes of the seed
	return Sig{By: s.name, Key: s.pub, Sig: base64.RawStdEncoding.EncodeToString(b)}
}

func signed(domain string, msg []byte) []byte {
	b := make([]byte, 0, len(domain)+1+len(msg))
	b = append(b, domain...)
	b = append(b, '\n')
	return append(b, msg...)
}

// Seal says up to where unsigned values are the old release's (see the package doc).
type Seal struct {
	Runs   uint64 `json:"runs"`   // the checkpoint bucket's last revision
	Saga   uint64 `json:"saga"`   // CAIRN_SAGA's last sequence
	Outbox uint64 `json:"outbox"` // CAIRN_OUTBOX's last sequence
	At     string `json:"at"`
	// Messages: Saga and Outbox were recorded by a release that signs saga records and
	// outbox messages. A seal without it (the release that signed only records) has its two
	// sequences moved once, to where the streams stand at the next registration.
	Messages bool `json:"messages,omitempty"`
	// History: the checkpoint bucket's last revision when a release that chains records
	// (each carries the revision it was written over; kvcheckpoint's history.go) first
	// registered keys. A record without that link is taken only at or below it. Chained says
	// it was recorded: a seal made before has it set once, to where the bucket stands at the
	// next registration.
	History uint64 `json:"history,omitempty"`
	Chained bool   `json:"chained,omitempty"`
}

// Ring checks signatures against the registered keys. It reads a name's key from the
// bucket the first time it meets the name and keeps it; a key changed since is seen after
// the process restarts. It remembers the signatures it has checked, so a value read twice is
// checked once.
type Ring struct {
	kv   jetstream.KeyValue // nil: only the keys given
	seal Seal

	mu      sync.Mutex
	keys    map[string]string // "service.<name>" or "approver.<name>" → public key
	checked map[string]struct{}
}

// maxChecked bounds the signatures a ring remembers.
const maxChecked = 8192

// OpenRing reads the seal from space sp's keys bucket (assets.Default: the reference
// night's, cairn-keys); keys are read when first needed.
func OpenRing(ctx context.Context, js jetstream.JetStream, sp assets.Space) (*Ring, error) {
	bucket := sp.Bucket(Bucket)
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("looking up bucket %s (run cairn init): %w", bucket, err)
	}
	r := &Ring{kv: kv, keys: map[string]string{}, checked: map[string]struct{}{}}
	e, err := kv.Get(ctx, SealKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, fmt.Errorf("bucket %s: %w", bucket, ErrNoSeal)
	case err != nil:
		return nil, fmt.Errorf("reading the seal in %s: %w", bucket, err)
	}
	if err := json.Unmarshal(e.Value(), &r.seal); err != nil {
		return nil, fmt.Errorf("reading the seal in %s: %w", bucket, err)
	}
	return r, nil
}

// NewRing is a ring of the given service keys (name → public key) and seal, reading no
// bucket: for tests and tools.
func NewRing(services map[string]string, seal Seal) *Ring {
	r := &Ring{keys: map[string]string{}, checked: map[string]struct{}{}, seal: seal}
	for name, pub := range services {
		r.keys[servicePrefix+name] = pub
	}
	return r
}

// Seal is the ring's seal.
func (r *Ring) Seal() Seal { return r.seal }

// Verify checks that sig is service sig.By's signature of msg in domain.
func (r *Ring) Verify(ctx context.Context, domain string, msg []byte, sig *Sig) error {
	if sig == nil {
		return ErrUnsigned
	}
	return r.verify(ctx, servicePrefix, domain, msg, sig)
}

// VerifyApprover checks that sig is approver sig.By's signature of msg.
func (r *Ring) VerifyApprover(ctx context.Context, msg []byte, sig *Sig) error {
	if sig == nil {
		return ErrUnsigned
	}
	return r.verify(ctx, approverPrefix, DomainApprove, msg, sig)
}

func (r *Ring) verify(ctx context.Context, prefix, domain string, msg []byte, sig *Sig) error {
	key, err := r.key(ctx, prefix+sig.By)
	if err != nil {
		return err
	}
	if sig.Key != "" && sig.Key != key {
		return fmt.Errorf("%w: signed by %q with key %s, which is not the key registered for it", ErrBadSignature, sig.By, sig.Key)
	}
	memo := domain + "\x00" + key + "\x00" + sig.Sig + "\x00" + string(msg)
	r.mu.Lock()
	_, ok := r.checked[memo]
	r.mu.Unlock()
	if ok {
		return nil
	}
	raw, err := base64.RawStdEncoding.DecodeString(sig.Sig)
	if err != nil {
		return fmt.Errorf("%w: signature of %q is not base64", ErrBadSignature, sig.By)
	}
	pub, err := nkeys.FromPublicKey(key)
	if err != nil {
		return fmt.Errorf("%w: the key registered for %q: %v", ErrBadSignature, sig.By, err)
	}
	if err := pub.Verify(signed(domain, msg), raw); err != nil {
		return fmt.Errorf("%w: %q's signature does not match", ErrBadSignature, sig.By)
	}
	r.mu.Lock()
	if len(r.checked) >= maxChecked {
		clear(r.checked)
	}
	r.checked[memo] = struct{}{}
	r.mu.Unlock()
	return nil
}

// key returns the public key registered under name, reading the bucket the first time.
func (r *Ring) key(ctx context.Context, name string) (string, error) {
	r.mu.Lock()
	key, ok := r.keys[name]
	r.mu.Unlock()
	if ok {
		return key, nil
	}
	if r.kv == nil {
		return "", fmt.Errorf("%w: %s", ErrUnknownSigner, name)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	e, err := r.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", fmt.Errorf("%w: no key registered for %s in %s", ErrUnknownSigner, name, Bucket)
	}
	if err != nil {
		return "", fmt.Errorf("reading the key of %s: %w", name, err)
	}
	key = string(e.Value())
	r.mu.Lock()
	r.keys[name] = key
	r.mu.Unlock()
	return key, nil
}

// Register puts service name's public key into the bucket (admin only); a key registered
// already is replaced, and the services pick the new one up when they restart.
func Register(ctx context.Context, kv jetstream.KeyValue, name, pub string) error {
	return put(ctx, kv, servicePrefix, name, pub)
}

// RegisterApprover puts approver name's public key into the bucket (admin only).
func RegisterApprover(ctx context.Context, kv jetstream.KeyValue, name, pub string) error {
	return put(ctx, kv, approverPrefix, name, pub)
}

func put(ctx context.Context, kv jetstream.KeyValue, prefix, name, pub string) error {
	if _, err := nkeys.FromPublicKey(pub); err != nil {
		return fmt.Errorf("%w: %q is not a public nkey: %v", ErrBadSignature, pub, err)
	}
	if _, err := kv.Put(ctx, prefix+name, []byte(pub)); err != nil {
		return fmt.Errorf("registering the key of %s%s: %w", prefix, name, err)
	}
	return nil
}

// Registered reads the public key registered for service name ("" when none).
func Registered(ctx context.Context, kv jetstream.KeyValue, name string) (string, error) {
	e, err := kv.Get(ctx, servicePrefix+name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return string(e.Value()), nil
}

// SealOnce records s as the seal unless one is recorded already, and returns the seal that
// holds: it is made once, when keys are first registered, and never moved, but for two
// steps, each once: a seal recorded before saga records and outbox messages were signed
// (Messages false) has its saga and outbox sequences moved to s's, so the unsigned messages
// that release wrote are still taken as the old release's; and a seal recorded before
// records were chained (Chained false) has its history set to s's checkpoint revision, so
// the unchained records that release wrote are still taken.
func SealOnce(ctx context.Context, kv jetstream.KeyValue, s Seal) (Seal, error) {
	s.Messages, s.Chained, s.History = true, true, s.Runs
	b, _ := json.Marshal(s)
	_, err := kv.Create(ctx, SealKey, b)
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return Seal{}, fmt.Errorf("recording the seal in %s: %w", Bucket, err)
	}
	var lost error // the last update refused: another registration may have moved it first
	for range 3 {
		e, err := kv.Get(ctx, SealKey)
		if err != nil {
			return Seal{}, fmt.Errorf("reading the seal in %s: %w", Bucket, err)
		}
		var held Seal
		if err := json.Unmarshal(e.Value(), &held); err != nil {
			return Seal{}, fmt.Errorf("reading the seal in %s: %w", Bucket, err)
		}
		if held.Messages && held.Chained {
			return held, nil
		}
		if !held.Messages {
			held.Saga, held.Outbox, held.Messages = max(held.Saga, s.Saga), max(held.Outbox, s.Outbox), true
		}
		if !held.Chained {
			held.History, held.Chained = max(held.History, held.Runs, s.Runs), true
		}
		b, _ := json.Marshal(held)
		if _, lost = kv.Update(ctx, SealKey, b, e.Revision()); lost == nil {
			return held, nil
		}
	}
	return Seal{}, fmt.Errorf("moving the seal in %s: %w", Bucket, lost)
}

// ApprovalMessage is what an approver signs to approve the plan planDigest of run runID
// (DomainApprove): the approval is of that plan, so it cannot be carried over to another
// plan or another run. The record keeps the signature (its approval's sig), and every
// reader checks it again.
func ApprovalMessage(runID, planDigest string) []byte {
	return []byte(runID + "\n" + planDigest)
}
