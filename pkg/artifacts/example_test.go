package artifacts_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
)

// A step saves its output and keeps the pointer in its checkpoint: a small JSON output
// inline, a larger one as an object named by its content. A later step reads it back as a
// stream, and a read whose bytes differ from the recorded digest is refused.
func ExampleStore_Save() {
	dir, _ := os.MkdirTemp("", "artifacts-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: assets.ObjectArtifacts}) // cairn init
	store, _ := artifacts.Open(ctx, js, assets.ObjectArtifacts)

	totals, _ := store.Save(ctx, "run-7", "compare", []byte(`{"matched":41,"differ":1}`))
	fmt.Printf("inline %s, object %q\n", totals.Inline, totals.Object)

	lines := strings.Repeat("inv-001;SUP-07;482.50\n", 200) // 4,400 bytes
	out, _ := store.Save(ctx, "run-7", "extract", []byte(lines))
	fmt.Println("object", out.Object, out.Size)
	again, _ := store.Save(ctx, "run-7", "extract", []byte(lines)) // a restart saves it again
	fmt.Println("same object:", again.Object == out.Object, again.Digest == out.Digest)

	n := 0
	store.Read(ctx, out, func(r io.Reader) error {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			n++
		}
		return sc.Err()
	})
	fmt.Println("lines read:", n)

	wrong := *out
	wrong.Digest = artifacts.Digest([]byte("what another attempt recorded"))
	_, err := store.Load(ctx, &wrong)
	fmt.Println("read against another digest:", errors.Is(err, artifacts.ErrDigest))
	// Output:
	// inline {"matched":41,"differ":1}, object ""
	// object run-7/extract/af0438319ffeca26c6a809d5187453ca33599a39d08e31d412821d42946e893a 4400
	// same object: true true
	// lines read: 200
	// read against another digest: true
}
