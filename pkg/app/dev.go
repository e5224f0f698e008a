package app

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/pipeline"
)

// DevConfig is where Dev runs a pipeline for its developer.
type DevConfig struct {
	// Pipeline is the pipeline Dev hosts. Its name names the space the connection takes its
	// replies in, and Dev makes its assets before build runs, so that build may open what
	// lives in them (a rate limit's bucket, as a step's limiter does).
	Pipeline pipeline.Definition
	// Dir keeps the embedded server's store (Dir/nats) and, unless the built Config names its
	// own KeysDir, the services' signing seeds (Dir/keys). Dev started again on the same Dir
	// finds its runs, and resumes the ones a stop interrupted; a second Dev on a Dir in use
	// is refused (Dir/dev.lock, on Linux and macOS).
	Dir string
	// Host is the server's address: a loopback one (127.0.0.1, ::1 or localhost), for the
	// server asks for no password; default 127.0.0.1.
	Host string
	// Port is the server's port; 0 or -1 takes a free one (the "nats:" line names it).
	Port int
	// AckWait is the step consumers' ack wait the assets are made with (Config.AckWait,
	// default 30s). The Config build returns takes it when its own is zero, and must not
	// name another.
	AckWait time.Duration
	// Example is the input of the run the "start:" line shows (with run_id "r-1"); nil: a
	// placeholder for each member of Pipeline.Input.
	Example map[string]any
	// Out receives the lines for the developer (see Dev); nil: standard output.
	Out io.Writer
}

// validate returns one sentence per broken rule.
func (d DevConfig) validate() error {
	var errs []error
	if err := d.Pipeline.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("pipeline %q: %w", d.Pipeline.Name, err))
	}
	if _, err := assets.SpaceOf(d.Pipeline.Name); err != nil {
		errs = append(errs, err)
	}
	if d.Dir == "" {
		errs = append(errs, errors.New("no Dir for the dev server's store and the signing seeds"))
	}
	if ip := net.ParseIP(d.Host); d.Host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		errs = append(errs, fmt.Errorf("host %q is not a loopback address: the dev server asks for no password, so it listens on this machine alone (127.0.0.1, ::1 or localhost)", d.Host))
	}
	if d.Port < -1 || d.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d is no TCP port (0 or -1 takes a free one)", d.Port))
	}
	if d.AckWait < 0 {
		errs = append(errs, fmt.Errorf("AckWait must be positive, not %s", d.AckWait))
	}
	return errors.Join(errs...)
}

// Dev runs a pipeline on a NATS server of its own, in this process, until ctx ends: the
// whole development loop in one call, so that a pipeline's binary offers a `dev` command
// (`enrich dev`) as `cairn dev` runs the reference night.
//
// It starts an embedded nats-server with JetStream on Host:Port, storing under Dir/nats;
// connects to it, taking replies under the pipeline's inbox as a hosted service does; makes
// the pipeline's assets; calls build for the Config of the pipeline's services, so that its
// steps are built against the live JetStream; then makes the services' signing keys and
// registers the pipeline (Init), and runs every service (Run). The Config build returns
// may leave JS, Pipeline and KeysDir zero (Dev fills them); its Pipeline, when set, must be
// d.Pipeline by name and steps, and its Replicas 0 or 1, for the dev server is one node.
//
// It writes to Out, as the server is up:
//
//	nats: nats://127.0.0.1:4222
//	data: /home/me/job/dev-data
//	start: nats -s nats://127.0.0.1:4222 pub cairn.job.runs.start '{"run_id":"r-1","source":"..."}'
//	ready
//
// the server's URL for `nats` and the operator's CLI (CAIRN_NATS_URL), the data directory,
// a start a developer may type, and "ready" alone on a line once the services are about to
// run: a start sent from then on is taken. It returns nil when ctx ends (the services
// stopped cleanly, the connection closed and the server shut down), or the first error.
func Dev(ctx context.Context, d DevConfig, build func(ctx context.Context, js jetstream.JetStream) (Config, error)) error {
	d.Host = cmp.Or(d.Host, "127.0.0.1")
	if d.Port == 0 {
		d.Port = -1
	}
	if err := d.validate(); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	out := d.Out
	if out == nil {
		out = os.Stdout
	}
	dir, err := filepath.Abs(d.Dir)
	if err != nil {
		return fmt.Errorf("dev: Dir %q: %w", d.Dir, err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	defer unlock()
	sp, _ := assets.SpaceOf(d.Pipeline.Name) // validated
	if d.Port > 0 {
		// A server whose port is taken says only that it did not start, after a while.
		addr := net.JoinHostPort(d.Host, strconv.Itoa(d.Port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("dev: %s is taken (another dev, or a nats-server, listens there): %w", addr, err)
		}
		l.Close()
	}
	s, err := serve(d.Pipeline.Name+"-dev", d.Pipeline.Name+" dev", d.Host, d.Port, dir, sp)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	defer s.close()
	url, js := s.srv.ClientURL(), s.js
	// The assets before build, which may open a bucket of them; Init checks them again with
	// the Config build returns.
	if err := assets.Ensure(ctx, js, assets.Config{Space: sp, Steps: d.Pipeline.Names(), AckWait: d.AckWait}); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	c, err := build(ctx, js)
	if err != nil {
		return fmt.Errorf("dev: building pipeline %s: %w", d.Pipeline.Name, err)
	}
	if c, err = d.fill(c, js, dir); err != nil {
		return fmt.Errorf("dev: the Config built: %w", err)
	}
	if err := c.validate(true); err != nil {
		return fmt.Errorf("dev: the Config built: %w", err)
	}
	if err := Init(ctx, c); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	fmt.Fprintf(out, "nats: %s\ndata: %s\nstart: %s\nready\n", url, dir, d.startLine(url, sp))
	return Run(ctx, c)
}

// fill gives c what Dev owns (the connection, the pipeline, the keys' folder under dir, the
// ack wait) and refuses what the dev server cannot be.
func (d DevConfig) fill(c Config, js jetstream.JetStream, dir string) (Config, error) {
	c = c.withJob()
	var errs []error
	if c.JS == nil {
		c.JS = js
	}
	switch {
	case c.Pipeline.Name == "":
		c.Pipeline = d.Pipeline
	case c.Pipeline.Name != d.Pipeline.Name:
		errs = append(errs, fmt.Errorf("its pipeline is %q, not DevConfig's %q", c.Pipeline.Name, d.Pipeline.Name))
	case !slices.Equal(c.Pipeline.Names(), d.Pipeline.Names()):
		errs = append(errs, fmt.Errorf("its pipeline's steps are %v, not DevConfig's %v, which the assets were made for", c.Pipeline.Names(), d.Pipeline.Names()))
	}
	c.KeysDir = cmp.Or(c.KeysDir, filepath.Join(dir, "keys"))
	const defaultAckWait = 30 * time.Second // assets.Config's
	switch {
	case c.AckWait == 0:
		c.AckWait = d.AckWait
	case cmp.Or(c.AckWait, defaultAckWait) != cmp.Or(d.AckWait, defaultAckWait):
		errs = append(errs, fmt.Errorf("its AckWait %s is not DevConfig's %s, which the step consumers were made with", c.AckWait, cmp.Or(d.AckWait, defaultAckWait)))
	}
	if c.Replicas > 1 {
		errs = append(errs, fmt.Errorf("Replicas %d: the dev server is one node (leave Replicas 0 or 1)", c.Replicas))
	}
	return c, errors.Join(errs...)
}

// startLine is a `nats pub` of a start of run r-1 of the Example input (placeholders of the
// pipeline's Input without one), on the server at url.
func (d DevConfig) startLine(url string, sp assets.Space) string {
	members := []string{`"run_id":"r-1"`}
	text := func(v any) string { // as typed: no \u003c for a <
		var b strings.Builder
		e := json.NewEncoder(&b)
		e.SetEscapeHTML(false)
		if e.Encode(v) != nil {
			b.Reset()
			_ = e.Encode(fmt.Sprint(v))
		}
		return strings.TrimSuffix(b.String(), "\n")
	}
	add := func(k string, v any) { members = append(members, text(k)+":"+text(v)) }
	if d.Example == nil {
		for _, k := range d.Pipeline.Input {
			add(k, "<"+k+">")
		}
	} else { // the input's members in its order, then any others sorted
		for _, k := range d.Pipeline.Input {
			if v, ok := d.Example[k]; ok {
				add(k, v)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(d.Example)) {
			if !slices.Contains(d.Pipeline.Input, k) {
				add(k, d.Example[k])
			}
		}
	}
	body := "{" + strings.Join(members, ",") + "}"
	return "nats -s " + url + " pub " + sp.RunStart() + " " + shellQuote(body)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
