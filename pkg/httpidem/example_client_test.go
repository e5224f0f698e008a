package httpidem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/cairnhq/cairn/pkg/httpidem"
)

func ExampleClient() {
	dir, _ := os.MkdirTemp("", "httpidem")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "api.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	defer db.Close()
	store := httpidem.NewSQLiteStore(db)
	if err := store.CreateTables(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/entries/1")
		w.WriteHeader(http.StatusCreated)
	})
	srv := httptest.NewServer(httpidem.New(store).Wrap(create))
	defer srv.Close()

	cl, _ := httpidem.NewClient(httpidem.ClientConfig{})
	ctx := context.Background()
	write := func(body string, token uint64) {
		rc, err := cl.Write(ctx, httpidem.Request{URL: srv.URL + "/entries", Key: "run-7:post:42",
			Run: "run-7", Token: token, Body: []byte(body)})
		var e *httpidem.Error
		switch {
		case err == nil:
			fmt.Printf("done %d %s replayed=%v\n", rc.Status, rc.Reference, rc.Replayed)
		case errors.Is(err, httpidem.ErrKeyConflict):
			fmt.Println("hand over: key conflict")
		case errors.Is(err, httpidem.ErrFenced) && errors.As(err, &e):
			fmt.Println("fenced: highest token", e.Problem.Extensions["highest"])
		default:
			fmt.Println(err)
		}
	}
	write("amount=5", 2)
	write("amount=5", 2)
	write("amount=6", 2)
	write("amount=5", 1)
	// Output:
	// done 201 /entries/1 replayed=false
	// done 201 /entries/1 replayed=true
	// hand over: key conflict
	// fenced: highest token 2
}
