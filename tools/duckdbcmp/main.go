// Command duckdbcmp is the DuckDB side of docs/PERFORMANCE.md's engine
// comparison: the seed study's stage table (SGLang-Omni events preset) over
// a bundle, as SQL, with DuckDB embedded through duckdb-go. It is a
// separate module so that asrprof itself does not link DuckDB (see
// PERFORMANCE.md for why); tools/bench.sh runs it with BENCH_DUCKDB=1.
//
//	duckdbcmp -mode json    DIR   # the stage table straight over the JSONL files
//	duckdbcmp -mode convert DIR   # requests.jsonl, events.jsonl → OUT/*.parquet
//	duckdbcmp -mode parquet DIR   # the stage table over OUT/*.parquet
package main

import (
	"database/sql"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	_ "github.com/duckdb/duckdb-go/v2"
)

const stages = `
with ev as (select request_id, stage, event_name, timestamp_ns ts from EVENTS),
per as (select request_id,
  min(ts) filter (event_name = 'scheduler_request_build_start') bs,
  min(ts) filter (event_name = 'scheduler_request_build_end') be,
  min(ts) filter (event_name = 'scheduler_queue_enter') qe,
  min(ts) filter (event_name = 'scheduler_prefill_start') ps,
  min(ts) filter (event_name = 'scheduler_prefill_end') pe,
  min(ts) filter (event_name = 'stage_input_received') sir,
  max(ts) filter (event_name = 'stage_complete') last_done,
  arg_min(stage, ts) filter (event_name = 'scheduler_prefill_start') sched
  from ev group by request_id),
done as (select p.request_id, max(e.ts) d from per p join ev e
  on e.request_id = p.request_id and e.event_name = 'stage_complete' and e.stage = p.sched group by p.request_id),
st as (select r.level, (p.be - p.bs) / 1e9 build, (p.qe - p.be) / 1e9 b2q, (p.ps - p.qe) / 1e9 q2s,
  (p.pe - p.ps) / 1e9 ff, (coalesce(d.d, p.last_done) - p.pe) / 1e9 dect, (p.last_done - p.sir) / 1e9 total,
  r.latency_s - (p.last_done - p.sir) / 1e9 co
  from REQUESTS r join per p on p.request_id = coalesce(r.server_request_id, r.request_id)
  left join done d on d.request_id = p.request_id
  where not r.warmup and r.status = 'ok')
select level,
  1e3 * avg(build), 1e3 * quantile_cont(build, 0.95), 1e3 * avg(b2q), 1e3 * quantile_cont(b2q, 0.95),
  1e3 * avg(q2s), 1e3 * quantile_cont(q2s, 0.95), 1e3 * avg(ff), 1e3 * quantile_cont(ff, 0.95),
  1e3 * avg(dect), 1e3 * quantile_cont(dect, 0.95), 1e3 * avg(total), 1e3 * quantile_cont(total, 0.95),
  1e3 * avg(co), 1e3 * quantile_cont(co, 0.95)
from st group by level order by min(r_order(level))`

func main() {
	mode := flag.String("mode", "json", "json, convert or parquet")
	out := flag.String("out", "", "where convert writes and parquet reads (default DIR/duckdb)")
	flag.Parse()
	dir := flag.Arg(0)
	if *out == "" {
		*out = filepath.Join(dir, "duckdb")
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		log.Fatal(err)
	}
	q := func(s string) string { return strings.ReplaceAll(s, "'", "''") }
	src := func(name string) string {
		if *mode == "parquet" {
			return fmt.Sprintf("read_parquet('%s')", q(filepath.Join(*out, name+".parquet")))
		}
		return fmt.Sprintf("read_json('%s', format = 'newline_delimited')", q(filepath.Join(dir, name+".jsonl")))
	}
	if *mode == "convert" {
		os.MkdirAll(*out, 0o755)
		for _, n := range []string{"requests", "events"} {
			if _, err := db.Exec(fmt.Sprintf("copy (select * from %s) to '%s' (format parquet)", src(n), q(filepath.Join(*out, n+".parquet")))); err != nil {
				log.Fatal(err)
			}
		}
		return
	}
	s := strings.NewReplacer("EVENTS", src("events"), "REQUESTS", src("requests"),
		"order by min(r_order(level))", "order by level").Replace(stages)
	rows, err := db.Query(s)
	if err != nil {
		log.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			log.Fatal(err)
		}
		fmt.Print(vals[0])
		for _, v := range vals[1:] {
			fmt.Printf("\t%.2f", v)
		}
		fmt.Println()
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
}
