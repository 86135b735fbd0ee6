// Runs one SQL query with DuckDB (npm's @duckdb/node-api, installed by
// tools/deps.sh) and prints its rows as JSON: the Parquet reader that is
// not asrprof's, for tables_test.go.
//   node duckdb_query.cjs MODULE_DIR "select ..."
const path = require('path');
const { DuckDBInstance } = require(path.join(process.argv[2], 'node_modules/@duckdb/node-api'));
(async () => {
  const db = await DuckDBInstance.create(':memory:');
  const con = await db.connect();
  const r = await con.runAndReadAll(process.argv[3]);
  console.log(JSON.stringify(r.getRowObjectsJson()));
})().catch((e) => { console.error(String(e)); process.exit(1); });
