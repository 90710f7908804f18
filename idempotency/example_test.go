package idempotency_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/idempotency"
)

// A charge endpoint behind the middleware: the second request with the key
// gets the first one's response, and the handler runs once.
func Example() {
	eng, err := dedup.Open(dedup.Options{}) // Dir: "./idem" to survive restarts
	if err != nil {
		panic(err)
	}
	defer eng.Close()
	mw, err := idempotency.New(idempotency.Options{Store: eng})
	if err != nil {
		panic(err)
	}
	charges := 0
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge ch_%d\n", charges)
	})))
	defer srv.Close()

	for i := 0; i < 2; i++ {
		req, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader(`{"amount":100}`))
		req.Header.Set("Idempotency-Key", "8e03978e")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Printf("%d %q replayed=%s\n", res.StatusCode, body, res.Header.Get("Idempotent-Replayed"))
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201 "charge ch_1\n" replayed=
	// 201 "charge ch_1\n" replayed=true
	// charges: 1
}
