// Command enrich runs the enrichment job's services, and its demo.
//
//	enrich init                make the job's NATS assets and signing keys
//	enrich service [NAME...]   run the named services (every one without names: the steps,
//	                           the supervisor and the compensator) until SIGTERM
//	enrich dev [-records FILE] the job whole in one process (app.Dev): a NATS server of its
//	                           own on CAIRN_NATS_URL's port (0: a free one), storing in
//	                           ENRICH_DATA_DIR, its assets and every service; with no
//	                           ENRICH_*_URL set, the stub APIs too, and a records file to
//	                           start a run of, until SIGTERM
//	enrich demo                the seed's story beside a plain restart-from-step-one
//	enrich faultmap            how each step survives faults (pkg/faultmap), and the gaps
//	enrich chaos-sandbox DIR   the job's outside systems for one trial of
//	                           `cairn chaos --pipeline enrich` (pkg/chaos), until stdin closes
//
// The settings are environment variables (Settings); a wrong one stops the command at
// start, naming the variable.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/examples/enrich"
	"github.com/cairnhq/cairn/examples/enrich/records"
	"github.com/cairnhq/cairn/examples/enrich/stubapi"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/chaos"
	"github.com/cairnhq/cairn/pkg/faultmap"
	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/ratelimit"
)

// Settings are the job's environment variables.
type Settings struct {
	NATSURL     string        `envconfig:"CAIRN_NATS_URL" default:"nats://127.0.0.1:4222"`
	NATSCreds   string        `envconfig:"CAIRN_NATS_CREDS"` // a user's credentials file, for a server with users
	DataDir     string        `envconfig:"ENRICH_DATA_DIR" default:"./enrich-data"`
	ProfileURL  string        `envconfig:"ENRICH_PROFILE_URL"`
	GeoURL      string        `envconfig:"ENRICH_GEO_URL"`
	RiskURL     string        `envconfig:"ENRICH_RISK_URL"`
	UploadURL   string        `envconfig:"ENRICH_UPLOAD_URL"`
	CallTimeout time.Duration `envconfig:"ENRICH_CALL_TIMEOUT" default:"2s"`
	GeoRPS      float64       `envconfig:"ENRICH_GEO_RPS" default:"15"`
	Lease       time.Duration `envconfig:"CAIRN_LEASE" default:"15s"`
	Heartbeat   time.Duration `envconfig:"CAIRN_HEARTBEAT" default:"5s"`
	// AckWait is how long a step event waits for its worker's heartbeat before it goes to
	// another: how soon a side-by-side (lease-free) step's work resumes after its worker died.
	AckWait time.Duration `envconfig:"CAIRN_ACK_WAIT" default:"30s"`
	Faults  string        `envconfig:"CAIRN_FAULTS"`
	// The settings every hosted pipeline takes: approval gates (CAIRN_APPROVAL_STEPS=upload,
	// CAIRN_APPROVAL_TIMEOUT) and notices (CAIRN_NOTIFY_EMAIL, CAIRN_NOTIFY_WEBHOOK,
	// CAIRN_NOTIFY_SECRET, CAIRN_SMTP_ADDR, CAIRN_MAIL_DIR).
	app.Settings
}

func load() (Settings, error) {
	var s Settings
	if err := envconfig.Process("", &s); err != nil {
		return s, err
	}
	return s, s.validate()
}

// validate returns one sentence per broken rule, naming the variable.
func (s Settings) validate() error {
	var errs []error
	for name, v := range map[string]string{"ENRICH_PROFILE_URL": s.ProfileURL, "ENRICH_GEO_URL": s.GeoURL, "ENRICH_RISK_URL": s.RiskURL, "ENRICH_UPLOAD_URL": s.UploadURL} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is not set: the URL of an outside system of the job", name))
		}
	}
	if s.CallTimeout <= 0 {
		errs = append(errs, fmt.Errorf("ENRICH_CALL_TIMEOUT must be positive, not %s", s.CallTimeout))
	}
	if s.AckWait < 2*s.Heartbeat {
		errs = append(errs, fmt.Errorf("CAIRN_ACK_WAIT (%s) must be at least twice CAIRN_HEARTBEAT (%s): a step's worker renews its event every heartbeat", s.AckWait, s.Heartbeat))
	}
	if s.GeoRPS <= 0 {
		errs = append(errs, fmt.Errorf("ENRICH_GEO_RPS must be positive, not %g", s.GeoRPS))
	}
	if err := s.Settings.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: enrich init | service [NAME...] | dev [-records FILE] | demo | faultmap | chaos-sandbox DIR")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "init", "service":
		var s Settings
		if s, err = load(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		err = serve(ctx, s, os.Args[1] == "init", os.Args[2:])
	case "dev":
		err = dev(ctx, os.Args[2:])
	case "demo":
		err = demo(ctx, os.Stdout)
	case "faultmap":
		err = faultMap(os.Stdout)
	case chaos.SandboxCommand:
		if len(os.Args) != 3 {
			fmt.Fprintln(os.Stderr, "usage: enrich chaos-sandbox DIR")
			os.Exit(2)
		}
		err = sandbox(ctx, os.Args[2])
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q: enrich init | service [NAME...] | dev [-records FILE] | demo | faultmap | chaos-sandbox DIR\n", os.Args[1])
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// config is the hosted job for settings s.
func config(js jetstream.JetStream, s Settings) (app.Config, error) {
	job, err := enrich.Job(enrich.Config{
		APIs:      records.Client{ProfileURL: s.ProfileURL, GeoURL: s.GeoURL, RiskURL: s.RiskURL, HTTP: &http.Client{}},
		UploadURL: s.UploadURL, CallTimeout: s.CallTimeout,
	})
	if err != nil {
		return app.Config{}, err
	}
	fs, err := faults.Parse(s.Faults, filepath.Join(s.DataDir, "faults"))
	if err != nil {
		return app.Config{}, fmt.Errorf("CAIRN_FAULTS: %w", err)
	}
	c := app.Config{
		JS: js, Job: job, KeysDir: filepath.Join(s.DataDir, "keys"),
		Limits: map[string]ratelimit.Limit{enrich.RateSetting: enrich.GeoLimit(s.GeoRPS)},
		Lease:  s.Lease, Heartbeat: s.Heartbeat, AckWait: s.AckWait, Faults: fs,
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	s.Settings.Apply(&c)
	return c, nil
}

// initConfig is what app.Init needs of the job whose data directory is dir: its steps and
// the systems an undo reverses (so that the compensator's key is made), no outside system.
func initConfig(js jetstream.JetStream, dir string) app.Config {
	job, err := enrich.Job(enrich.Config{})
	if err != nil {
		panic(err) // the default client configuration
	}
	return app.Config{JS: js, Job: job, KeysDir: filepath.Join(dir, "keys"), AckWait: 3 * time.Second}
}

// serve makes the assets (init) or runs the named services.
func serve(ctx context.Context, s Settings, init bool, names []string) error {
	// A process of one service takes its replies under that service's inbox, which its own
	// NATS user (`cairn permissions --pipeline enrich --service NAME`) allows.
	inbox := enrich.Space.Inbox()
	if len(names) == 1 {
		inbox = enrich.Space.ServiceInbox(names[0])
	}
	opts := []nats.Option{nats.Name("enrich"), nats.MaxReconnects(-1), nats.CustomInboxPrefix(inbox)}
	if s.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(s.NATSCreds))
	}
	nc, err := nats.Connect(s.NATSURL, opts...)
	if err != nil {
		return fmt.Errorf("connecting to CAIRN_NATS_URL %s: %w", s.NATSURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	c, err := config(js, s)
	if err != nil {
		return err
	}
	if init {
		if err := app.Init(ctx, c); err != nil {
			return err
		}
		fmt.Println("the job's assets exist and its services' keys are registered")
		return nil
	}
	fmt.Println("ready")
	return app.Run(ctx, c, names...)
}

// devRecords is how many records the file `enrich dev` writes has.
const devRecords = 20

// dev is `enrich dev`: the job on a NATS server of its own (app.Dev) on CAIRN_NATS_URL's
// address, storing in ENRICH_DATA_DIR, against the outside systems the ENRICH_*_URL settings
// name or, with none of them set, the stub APIs in this process (their upload rows in
// ENRICH_DATA_DIR/upload). It prints a start of the records file -records names (default
// ENRICH_DATA_DIR/records.jsonl, written when missing), and "ready" as the services start.
func dev(ctx context.Context, args []string) error {
	flags := flag.NewFlagSet("dev", flag.ContinueOnError)
	source := flags.String("records", "", fmt.Sprintf("the records file the printed start names (default: ENRICH_DATA_DIR/records.jsonl, written with %d records when missing)", devRecords))
	if err := flags.Parse(args); err != nil {
		return err
	}
	var s Settings
	if err := envconfig.Process("", &s); err != nil {
		return err
	}
	host, port, err := devAddr(s.NATSURL)
	if err != nil {
		return err
	}
	urls := []struct {
		name string
		v    *string
	}{{"ENRICH_PROFILE_URL", &s.ProfileURL}, {"ENRICH_GEO_URL", &s.GeoURL}, {"ENRICH_RISK_URL", &s.RiskURL}, {"ENRICH_UPLOAD_URL", &s.UploadURL}}
	var unset []string
	for _, u := range urls {
		if *u.v == "" {
			unset = append(unset, u.name)
		}
	}
	stubs := len(unset) == len(urls) // the stub APIs stand in for all four
	if !stubs && len(unset) > 0 {
		return fmt.Errorf("%s not set: set all four ENRICH_*_URL, or none for the stub APIs", strings.Join(unset, ", "))
	}
	path, err := devSource(*source, s.DataDir)
	if err != nil {
		return err
	}
	var apis *stubapi.APIs
	rows := filepath.Join(s.DataDir, "upload")
	if stubs {
		if err := os.MkdirAll(rows, 0o755); err != nil {
			return err
		}
		if apis, err = stubapi.Start(stubapi.Config{Dir: rows}); err != nil {
			return err
		}
		defer apis.Close()
		s.ProfileURL, s.GeoURL, s.RiskURL, s.UploadURL = apis.ProfileURL, apis.GeoURL, apis.RiskURL, apis.UploadURL
	}
	if err := s.validate(); err != nil {
		return err
	}
	if stubs {
		fmt.Printf("stub APIs: profile %s geo %s risk %s upload %s (rows in %s)\n", apis.ProfileURL, apis.GeoURL, apis.RiskURL, apis.UploadURL, rows)
	}
	fmt.Printf("records: %s\n", path)
	return app.Dev(ctx, app.DevConfig{
		Pipeline: enrich.Pipeline, Dir: s.DataDir, Host: host, Port: port, AckWait: s.AckWait,
		Example: map[string]any{enrich.ParamSource: path},
	}, func(ctx context.Context, js jetstream.JetStream) (app.Config, error) {
		return config(js, s)
	})
}

// devAddr is the host and port of CAIRN_NATS_URL, where `enrich dev` serves NATS.
func devAddr(natsURL string) (string, int, error) {
	u, err := url.Parse(natsURL)
	if err != nil {
		return "", 0, fmt.Errorf("CAIRN_NATS_URL %q is not a URL", natsURL) // err would repeat a password
	}
	host, portText, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", 0, fmt.Errorf("CAIRN_NATS_URL %q needs host:port: %w", natsURL, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return "", 0, fmt.Errorf("CAIRN_NATS_URL %q: port %q is not a number", natsURL, portText)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", 0, fmt.Errorf("CAIRN_NATS_URL %q: the dev server asks for no password, so it listens on a loopback address alone (127.0.0.1, ::1 or localhost)", natsURL)
	}
	return host, port, nil
}

// devSource is the absolute path of the records file a dev run starts with: given, it must
// exist; else dir/records.jsonl, written when missing.
func devSource(given, dir string) (string, error) {
	path := cmp.Or(given, filepath.Join(dir, "records.jsonl"))
	path, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	switch _, err := os.Stat(path); {
	case err == nil:
		return path, nil
	case given != "":
		return "", fmt.Errorf("-records: %w", err)
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if _, err := records.Generate(path, devRecords, 1); err != nil {
		return "", err
	}
	return path, nil
}

// analyze is the job's fault map with the geo API's declared rate.
func analyze(geoRPS float64) (faultmap.Map, error) {
	return faultmap.Analyze(enrich.Pipeline, faultmap.Settings{
		ProgressSteps: []string{enrich.Profile, enrich.Geo, enrich.Risk},
		RateLimits:    map[string]float64{enrich.RateSetting: geoRPS},
		SharedLimits:  map[string]ratelimit.Limit{enrich.RateSetting: enrich.GeoLimit(geoRPS)},
	})
}

// faultMap prints the job's fault map under the settings of the environment (the rate
// ENRICH_GEO_RPS; the runner's defaults).
func faultMap(w io.Writer) error {
	var s Settings
	if err := envconfig.Process("", &s); err != nil {
		return err
	}
	m, err := analyze(s.GeoRPS)
	if err != nil {
		return err
	}
	if err := m.WriteText(w); err != nil {
		return err
	}
	return m.Err()
}
