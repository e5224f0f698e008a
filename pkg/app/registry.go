package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/faultmap"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/ratelimit"
	"github.com/cairnhq/cairn/pkg/runner"
)

// BucketPipelines keeps each hosted pipeline's registration, by pipeline name: what Init
// registered of it, for the tools that read a pipeline they were not built with
// (`cairn faultmap --pipeline NAME`).
const BucketPipelines = "cairn-pipelines"

// ErrNotRegistered: no pipeline of that name is registered (run its Init).
var ErrNotRegistered = errors.New("pipeline not registered")

// Registration is what Init records of a pipeline: its definition's data (its steps, its
// input, its natural key; not its functions), the settings its fault map is drawn under, and
// how its assets are made (`cairn init` checks them, `cairn runs` reads its runs).
type Registration struct {
	Name       string            `json:"name"`
	Input      []string          `json:"input"`
	NaturalKey string            `json:"natural_key"`
	Steps      []pipeline.Step   `json:"steps"`
	Settings   faultmap.Settings `json:"settings"`
	Replicas   int               `json:"replicas,omitempty"`
	AckWait    time.Duration     `json:"ack_wait,omitempty"`
	Sizes      *assets.Limits    `json:"sizes,omitempty"`
}

// Space is the registered pipeline's share of the NATS account.
func (r Registration) Space() (assets.Space, error) { return assets.SpaceOf(r.Name) }

// Assets is the registered pipeline's asset configuration, as its Init made it.
func (r Registration) Assets() (assets.Config, error) {
	sp, err := r.Space()
	if err != nil {
		return assets.Config{}, err
	}
	c := assets.Config{Space: sp, Replicas: r.Replicas, Steps: r.Definition().Names(), AckWait: r.AckWait}
	if r.Sizes != nil {
		c.Limits = *r.Sizes
	}
	return c, nil
}

// Definition is the registered definition (without CheckInput and RunID, which are code).
func (r Registration) Definition() pipeline.Definition {
	return pipeline.Definition{Name: r.Name, Input: r.Input, NaturalKey: r.NaturalKey, Steps: r.Steps}
}

// registration is c's Registration: the runner's settings, the steps that count their
// progress, and the declared limits.
func (c Config) registration() Registration {
	s := faultmap.Settings{RetryAttempts: c.RetryAttempts, LoopGuard: c.LoopGuard, RateLimits: map[string]float64{}, SharedLimits: map[string]ratelimit.Limit{}}
	for name, step := range c.Steps {
		if runner.AbilitiesOf(step).CountsProgress {
			s.ProgressSteps = append(s.ProgressSteps, name)
		}
	}
	slices.Sort(s.ProgressSteps)
	for setting, l := range c.Limits {
		s.RateLimits[setting] = l.PerSecond
		s.SharedLimits[setting] = l
	}
	d := c.Pipeline
	r := Registration{Name: d.Name, Input: d.Input, NaturalKey: d.NaturalKey, Steps: d.Steps, Settings: s, Replicas: c.Replicas, AckWait: c.AckWait}
	if c.Sizes != (assets.Limits{}) {
		r.Sizes = &c.Sizes
	}
	return r
}

// register records c's registration in BucketPipelines, making the bucket when missing.
func register(ctx context.Context, c Config) error {
	kv, err := c.JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketPipelines, History: 4, Storage: jetstream.FileStorage, Replicas: max(c.Replicas, 1)})
	if err != nil {
		return fmt.Errorf("the pipelines' bucket %s: %w", BucketPipelines, err)
	}
	b, err := json.Marshal(c.registration())
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, c.Pipeline.Name, b); err != nil {
		return fmt.Errorf("registering pipeline %q in %s: %w", c.Pipeline.Name, BucketPipelines, err)
	}
	return nil
}

// Registered reads the registration of pipeline name.
func Registered(ctx context.Context, js jetstream.JetStream, name string) (Registration, error) {
	var r Registration
	kv, err := js.KeyValue(ctx, BucketPipelines)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return r, fmt.Errorf("%w: %q (no pipeline is: bucket %s is missing)", ErrNotRegistered, name, BucketPipelines)
	}
	if err != nil {
		return r, err
	}
	e, err := kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return r, fmt.Errorf("%w: %q (%s)", ErrNotRegistered, name, names(ctx, kv))
	}
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return r, fmt.Errorf("the registration of %q in %s: %w", name, BucketPipelines, err)
	}
	return r, nil
}

// All reads every registered pipeline's registration, sorted by name; none (and no error)
// when the bucket is missing.
func All(ctx context.Context, js jetstream.JetStream) ([]Registration, error) {
	kv, err := js.KeyValue(ctx, BucketPipelines)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	keys, err := kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", BucketPipelines, err)
	}
	slices.Sort(keys)
	out := make([]Registration, 0, len(keys))
	for _, k := range keys {
		r, err := Registered(ctx, js, k)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// names says which pipelines are registered, for an error.
func names(ctx context.Context, kv jetstream.KeyValue) string {
	keys, err := kv.Keys(ctx)
	if err != nil || len(keys) == 0 {
		return "none is registered"
	}
	slices.Sort(keys)
	return fmt.Sprintf("registered: %v", keys)
}
