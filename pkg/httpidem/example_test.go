package httpidem_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/cairnhq/cairn/pkg/httpidem"
)

func Example() {
	dir, _ := os.MkdirTemp("", "httpidem")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "api.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	defer db.Close()
	store := httpidem.NewSQLiteStore(db)
	if err := store.CreateTables(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	runs := 0
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "entry %d\n", runs)
	})
	srv := httptest.NewServer(httpidem.New(store, httpidem.WithKeyRequired()).Wrap(create))
	defer srv.Close()

	key, _ := httpidem.FormatKey("run-7:post:42")
	for _, body := range []string{"amount=5", "amount=5", "amount=6"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/entries", strings.NewReader(body))
		req.Header.Set(httpidem.KeyHeader, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 400 {
			var p httpidem.Problem
			json.Unmarshal(b, &p)
			fmt.Printf("%d %s: %s (key %v)\n", resp.StatusCode, resp.Header.Get("Content-Type"), p.Title, p.Extensions["key"])
			continue
		}
		fmt.Printf("%d replayed=%q %s", resp.StatusCode, resp.Header.Get(httpidem.ReplayedHeader), b)
	}
	fmt.Println("handler runs:", runs)
	// Output:
	// 201 replayed="" entry 1
	// 201 replayed="true" entry 1
	// 422 application/problem+json: Idempotency-Key reused (key run-7:post:42)
	// handler runs: 1
}
