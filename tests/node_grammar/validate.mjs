// Validates generated texts, independently of nucleus: each FILE holds one output.
//   node validate.mjs schema SCHEMA_FILE FILE...   JSON.parse, then ajv (draft 2020-12, formats)
//   node validate.mjs regex REGEX FILE...          the whole text matches REGEX (code points: /u)
// Prints one line per failure and "validated N of M"; exits 1 when any failed.
import { readFileSync } from 'node:fs';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const [mode, spec, ...files] = process.argv.slice(2);
let check;
if (mode === 'schema') {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  const validate = ajv.compile(JSON.parse(readFileSync(spec, 'utf8')));
  check = (text) => {
    let value;
    try { value = JSON.parse(text); } catch (e) { return `not JSON: ${e.message}`; }
    return validate(value) ? null : ajv.errorsText(validate.errors);
  };
} else if (mode === 'regex') {
  const re = new RegExp(`^(?:${spec})$`, 'u');
  check = (text) => (re.test(text) ? null : 'does not match the regular expression');
} else {
  console.error('usage: validate.mjs schema|regex SPEC FILE...');
  process.exit(2);
}
let good = 0;
for (const f of files) {
  const text = readFileSync(f, 'utf8');
  const why = check(text);
  if (why) console.log(`INVALID ${f}: ${why}: ${JSON.stringify(text).slice(0, 300)}`);
  else good++;
}
console.log(`validated ${good} of ${files.length}`);
process.exit(good === files.length ? 0 : 1);
