// jv EXPR FILE: prints the value of the JavaScript expression EXPR, with `d` bound to the
// JSON parsed from FILE. Strings print raw, undefined prints "undefined", everything else as
// JSON. A file that is not JSON prints "<not json>". Used by lib.sh (no jq needed).
import { readFileSync } from 'node:fs';

const [expr, file] = process.argv.slice(2);
let d;
try {
  d = JSON.parse(readFileSync(file, 'utf8'));
} catch {
  console.log('<not json>');
  process.exit(0);
}
let v;
try {
  v = new Function('d', `return (${expr});`)(d);
} catch (e) {
  v = `<error: ${e.message}>`;
}
if (typeof v === 'string') console.log(v);
else if (v === undefined) console.log('undefined');
else console.log(JSON.stringify(v));
