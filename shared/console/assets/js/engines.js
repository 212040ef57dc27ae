// "Connect an engine": how pyiceberg, DuckDB and Spark attach a catalog through Flotilla's
// Iceberg REST endpoint (`<endpoint>/iceberg`, warehouse `<account>/<catalog name>`).
// The recipes name the token as a placeholder or an environment variable: the console never
// prints the session's token.

import { h } from './dom.js';
import { icebergBase } from './api.js';

const pyStr = (s) => JSON.stringify(String(s)); // a valid Python string literal
const sqlStr = (s) => `'${String(s).replace(/'/g, "''")}'`;
const shStr = (s) => `'${String(s).replace(/'/g, "'\\''")}'`;

/** An identifier for engines that need one (Spark catalog name, DuckDB alias). */
function ident(name) {
  const s = String(name).toLowerCase().replace(/[^a-z0-9_]+/g, '_').replace(/^_+|_+$/g, '');
  return /^[a-z_]/.test(s) ? s : `c_${s || 'flotilla'}`;
}

export function recipes(account, catalog) {
  const uri = icebergBase();
  const warehouse = `${account}/${catalog.display_name}`;
  const alias = ident(catalog.display_name);
  const blocks = [
    ['pyiceberg', 'Python', [
      'import os',
      'from pyiceberg.catalog import load_catalog',
      '',
      `catalog = load_catalog(${pyStr(alias)}, **{`,
      '    "type": "rest",',
      `    "uri": ${pyStr(uri)},`,
      `    "warehouse": ${pyStr(warehouse)},`,
      '    "token": os.environ["FLOTILLA_TOKEN"],',
      '})',
      'print(catalog.list_namespaces())',
    ]],
    ['DuckDB', 'SQL', [
      'INSTALL iceberg; LOAD iceberg; LOAD httpfs;',
      'CREATE SECRET flotilla (TYPE iceberg, TOKEN \'<your Flotilla token>\');',
      `ATTACH ${sqlStr(warehouse)} AS ${alias} (`,
      '    TYPE iceberg,',
      '    SECRET flotilla,',
      `    ENDPOINT ${sqlStr(uri)},`,
      '    SUPPORT_NESTED_NAMESPACES true',
      ');',
      'SHOW ALL TABLES;',
    ]],
    ['Spark', 'shell', [
      'spark-sql \\',
      '  --packages org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.9.2 \\',
      `  --conf spark.sql.catalog.${alias}=org.apache.iceberg.spark.SparkCatalog \\`,
      `  --conf spark.sql.catalog.${alias}.type=rest \\`,
      `  --conf spark.sql.catalog.${alias}.uri=${shStr(uri)} \\`,
      `  --conf spark.sql.catalog.${alias}.warehouse=${shStr(warehouse)} \\`,
      `  --conf spark.sql.catalog.${alias}.token="$FLOTILLA_TOKEN"`,
    ]],
  ];
  return h('div', { class: 'recipes' },
    h('p', { class: 'lead' },
      'Engines reach this catalog through Flotilla\u2019s Iceberg REST endpoint with the same bearer tokens as the API. ',
      'Base URI ', h('code', { class: 'mono', 'data-field': 'iceberg-uri' }, uri), ', warehouse ', h('code', { class: 'mono', 'data-field': 'warehouse' }, warehouse), '.'),
    blocks.map(([engine, lang, lines]) => {
      const text = lines.join('\n');
      const copy = h('button', { type: 'button', class: 'secondary small' }, 'Copy');
      copy.addEventListener('click', async () => {
        try {
          await navigator.clipboard.writeText(text);
          copy.textContent = 'Copied';
        } catch {
          copy.textContent = 'Select and copy';
        }
      });
      return h('div', { class: 'recipe', 'data-engine': engine },
        h('div', { class: 'recipe-head' }, h('h3', {}, engine), h('span', { class: 'muted' }, lang), copy),
        h('pre', { class: 'code' }, h('code', {}, text)));
    }),
    h('p', { class: 'muted small' }, 'Set FLOTILLA_TOKEN to a token for this account (never paste a token into shared notebooks). Tables that an overlay manages are read-only through the endpoint.'),
  );
}
