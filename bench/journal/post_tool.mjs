// bench/journal/post_tool.mjs: sending prepared POST bodies with bench_http_post
// (http_post.c, built with -DOPSD_BENCH=ON next to opsd, or named by BENCH_POST_TOOL).
// node's fetch spent more CPU per 66 KB message than opsd on the same two cores.
import { existsSync, openSync, writeSync, closeSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { spawn } from 'node:child_process';

export function postTool(opsdBin) {
  const p = process.env.BENCH_POST_TOOL || join(opsdBin, '..', 'bench', 'bench_http_post');
  return existsSync(p) ? p : null;
}

// Writes the bodies to a file in dir, the tool's input (before the clock starts).
export function writeBodies(bodies, dir) {
  const file = join(dir, `post-${process.pid}-${Date.now()}.bin`);
  const fd = openSync(file, 'w');
  for (const p of bodies) { const b = Buffer.from(p); writeSync(fd, `${b.length}\n`); writeSync(fd, b); }
  closeSync(fd);
  return file;
}

// Posts the bodies of file to url + path over conc connections, then removes the file;
// resolves to the tool's client CPU seconds. Rejects when a request is not answered 200.
export async function postFile(tool, url, path, file, conc) {
  const u = new URL(url);
  const child = spawn(tool, [u.hostname, u.port, path, file, String(conc)], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (b) => { out += b; });
  const code = await new Promise((res) => child.on('exit', res));
  rmSync(file, { force: true });
  if (code !== 0) throw new Error(`bench_http_post exited ${code}`);
  return JSON.parse(out).client_cpu_s;
}
