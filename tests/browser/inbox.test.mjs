// The web inbox in real headless Chromium, with real clicks and typing.
//
// Run by run.sh, which starts a gateway and passes: TERN_GATEWAY_URL, TERN_KEY (an agent
// key, for creating requests through the agent API), TERN_LOGIN_URL (a one-time reviewer
// login link), ARTIFACTS (where screenshots go) and CHROMIUM (the browser binary).
//
// The steps share one browser session and run in order (each builds on the login); a
// failed step is reported and the next ones still run. Prints "browser: N passed, N failed".

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { chromium } from 'playwright-core';

const BASE = process.env.TERN_GATEWAY_URL;
const KEY = process.env.TERN_KEY;
const LOGIN = process.env.TERN_LOGIN_URL;
const ARTIFACTS = process.env.ARTIFACTS || 'browser-artifacts';
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

for (const [name, value] of Object.entries({ TERN_GATEWAY_URL: BASE, TERN_KEY: KEY, TERN_LOGIN_URL: LOGIN })) {
  if (!value) {
    console.error(`${name} is not set; run this through tests/browser/run.sh`);
    process.exit(2);
  }
}

function assert(cond, msg) {
  if (!cond) throw new Error(`assertion failed: ${msg}`);
}

// ---- the agent's side: the Pump Up agent API with the agent key ----

async function agent(method, p, body) {
  const r = await fetch(BASE + p, {
    method,
    headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null };
}

async function newTask(name) {
  const r = await agent('POST', '/api/tasks', { name, projectName: 'default' });
  assert(r.status === 201, `create task: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.id;
}

async function newApproval(taskId, body) {
  const r = await agent('POST', '/api/approval-requests', { projectName: 'default', taskId, ...body });
  assert(r.status === 201, `create approval: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.eventId;
}

async function newElicitation(taskId, body) {
  const r = await agent('POST', '/api/elicitation-requests', { projectName: 'default', taskId, ...body });
  assert(r.status === 201, `create elicitation: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.eventId;
}

/** Uploads a file (multipart, field `file`, as the SDK sends it) and attaches it to the task. */
async function attach(taskId, name, type, bytes) {
  const form = new FormData();
  form.append('file', new Blob([bytes], { type }), name);
  const r = await fetch(BASE + '/api/uploads', { method: 'POST', headers: { Authorization: `Bearer ${KEY}` }, body: form });
  const body = await r.json();
  assert(r.status === 201, `upload: ${r.status} ${JSON.stringify(body)}`);
  const a = await agent('POST', '/api/agent-actions', {
    projectName: 'default', taskId, description: `Attached ${name}`,
    addAttachments: [{ uploadId: body.id, label: name }],
  });
  assert(a.status === 201, `attach: ${a.status} ${JSON.stringify(a.body)}`);
  return body.id;
}

/** A small PNG (a blue-to-green gradient), made here so the test needs no image files. */
function png(width, height) {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (buf) => {
    let c = 0xffffffff;
    for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type, 'ascii'), data]);
    const c = Buffer.alloc(4);
    c.writeUInt32BE(crc(td));
    return Buffer.concat([len, td, c]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // RGB
  const rows = [];
  for (let y = 0; y < height; y++) {
    const row = Buffer.alloc(1 + width * 3);
    for (let x = 0; x < width; x++) {
      row[1 + x * 3] = 40;
      row[2 + x * 3] = Math.round((200 * x) / width);
      row[3 + x * 3] = Math.round(220 - (120 * y) / height);
    }
    rows.push(row);
  }
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr),
    chunk('IDAT', zlib.deflateSync(Buffer.concat(rows))),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

// ---- the browser ----

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tern-chromium-'));
fs.mkdirSync(ARTIFACTS, { recursive: true });
// The machine's network may be closed: nothing in the browser may try to reach out.
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: CHROMIUM,
  headless: true,
  viewport: { width: 1100, height: 900 },
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
});
const page = context.pages()[0] || (await context.newPage());

async function shot(p, name) {
  await p.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/** The request ids of the list's rows, top to bottom. */
async function rowIds(p) {
  return p.locator('a.row').evaluateAll((rows) => rows.map((r) => r.dataset.id));
}

const state = {};
const steps = [];
function step(name, fn) {
  steps.push({ name, fn });
}

step('log in by link', async () => {
  const taskId = await newTask('Quarterly refunds');
  state.taskId = taskId;
  state.first = await newApproval(taskId, { summary: 'Waiting before login' });
  // A chat client's link preview fetches the link first: that must not use it up.
  const preview = await fetch(LOGIN);
  assert(preview.status === 200, `the link's page: ${preview.status}`);
  assert(!preview.headers.get('set-cookie'), 'the link page signs nobody in');
  await page.goto(LOGIN);
  await shot(page, '00-sign-in');
  await page.getByRole('button', { name: 'Sign in' }).click();
  // The signed-in page moves on to the inbox by itself.
  await page.waitForURL(`${BASE}/inbox`);
  await page.getByRole('heading', { name: 'Pending requests' }).waitFor();
  assert((await page.locator('.who').innerText()).includes('Signed in as'), 'signed in');
  const cookies = await context.cookies(BASE);
  const session = cookies.find((c) => c.name === 'tern_inbox');
  assert(session, 'session cookie set');
  assert(session.httpOnly && session.sameSite === 'Strict' && session.secure, `cookie flags: ${JSON.stringify(session)}`);
  assert((await rowIds(page)).includes(state.first), 'the pending request is listed');
  await shot(page, '01-list-after-login');
  // A used link does not log in again.
  const again = await context.newPage();
  const r = await again.goto(LOGIN);
  assert(r.status() === 401, `a used link is refused: ${r.status()}`);
  await again.close();
});

step('approve a request with real clicks', async () => {
  const photo = await attach(state.taskId, 'parcel-photo.png', 'image/png', png(240, 150));
  const receipt = await attach(state.taskId, 'receipt.txt', 'text/plain', Buffer.from('Order 1042: 40 EUR\n'));
  const id = await newApproval(state.taskId, {
    summary: 'Refund 40 EUR to Ada Lovelace',
    attachments: [photo, receipt],
    keyValueContext: { amount: '40 EUR', customer: 'Ada Lovelace', reason: 'Damaged parcel' },
    recommendation: { outcome: { type: 'APPROVE' }, confidence: 0.85, rationale: 'Photo shows the damage; first refund.' },
  });
  state.approval = id;
  await page.goto(`${BASE}/inbox`);
  await page.getByRole('link', { name: /Refund 40 EUR to Ada Lovelace/ }).click();
  await page.waitForURL(`${BASE}/inbox/requests/${id}`);
  await page.getByRole('heading', { name: 'Refund 40 EUR to Ada Lovelace' }).waitFor();
  assert(await page.getByRole('cell', { name: 'Damaged parcel' }).isVisible(), 'context shown');
  // The recommendation is shown and pre-selected.
  assert((await page.locator('.recommendation').innerText()).includes('Approve'), 'recommendation shown');
  assert(await page.getByRole('radio', { name: /^Approve/ }).isChecked(), 'APPROVE pre-selected');
  // The image shows inline (it loaded through the reviewer's session); the text file is a download.
  const img = page.locator(`img[src="/inbox/uploads/${photo}"]`);
  await img.waitFor();
  assert(await img.evaluate((el) => el.complete && el.naturalWidth === 240), 'the image loaded');
  const link = page.getByRole('link', { name: 'receipt.txt' });
  assert((await link.getAttribute('download')) !== null, 'other files are downloads');
  await shot(page, '02-approval-page');
  // Change the mind twice, by clicking, and type a note.
  await page.getByText('Escalate', { exact: true }).click();
  assert(await page.getByRole('radio', { name: 'Escalate' }).isChecked(), 'escalate chosen');
  await page.getByText('Approve', { exact: true }).click();
  await page.getByLabel('Note').click();
  await page.keyboard.type('Refund approved; parcel photo checked.');
  // Reason codes are for machines: the form has no field for one.
  assert((await page.getByLabel('Reason code').count()) === 0, 'no reason code field');
  await page.getByRole('button', { name: 'Submit decision' }).click();
  await page.waitForURL(`${BASE}/inbox/requests/${id}?done=1`);
  await page.getByText('Your decision was recorded.').waitFor();
  await shot(page, '03-approval-decided');
  const r = await agent('GET', `/api/approval-requests/${id}/result`);
  assert(r.status === 200, `the agent reads 200: ${r.status}`);
  assert(r.body.outcome.type === 'APPROVE', JSON.stringify(r.body));
  assert(r.body.outcome.note === 'Refund approved; parcel photo checked.', JSON.stringify(r.body));
  assert(r.body.outcome.reasonCode === undefined, JSON.stringify(r.body));
  assert(typeof r.body.decidedBy === 'string' && r.body.decidedBy.length > 0, 'decidedBy names the reviewer');
});

step('answer an elicitation: one invalid value, then a valid answer', async () => {
  const id = await newElicitation(state.taskId, {
    summary: 'Set up the new customer account',
    keyValueContext: { customer: 'Ada Lovelace' },
    fields: [
      { type: 'Text', id: 'email', label: 'Contact email', required: true, format: 'EMAIL' },
      { type: 'TextArea', id: 'notes', label: 'Notes', required: false, maxLength: 200 },
      { type: 'Number', id: 'seats', label: 'Seats', required: true, integerOnly: true, min: 1, max: 50 },
      { type: 'Slider', id: 'priority', label: 'Priority', required: true, min: 0, max: 10, step: 2 },
      { type: 'Switch', id: 'vip', label: 'VIP customer', required: false },
      { type: 'Select', id: 'plan', label: 'Plan', required: true, options: ['free', 'team', 'enterprise'] },
      { type: 'Multiselect', id: 'regions', label: 'Regions', required: true, options: ['EU', 'US', 'APAC'] },
      { type: 'DateField', id: 'start', label: 'Start date', required: true, min: '2030-01-01' },
      { type: 'DateTime', id: 'kickoff', label: 'Kick-off call', required: false },
      { type: 'Time', id: 'standup', label: 'Daily stand-up', required: false },
    ],
    recommendation: [
      { fieldId: 'plan', value: 'team', confidence: 0.7, rationale: 'Five people on the trial' },
      { fieldId: 'priority', value: 4 },
    ],
  });
  state.elicitation = id;
  await page.goto(`${BASE}/inbox`);
  await page.getByRole('link', { name: /Set up the new customer account/ }).click();
  await page.waitForURL(`${BASE}/inbox/requests/${id}`);
  // Pre-fills from the agent's bids.
  assert((await page.getByLabel('Plan').inputValue()) === 'team', 'plan pre-filled');
  assert((await page.locator('input[type=range]').inputValue()) === '4', 'slider pre-filled');
  await shot(page, '04-elicitation-page');

  // "ops@localhost" passes the browser's email check but not the inbox's (no dotted domain).
  await page.getByLabel('Contact email').fill('ops@localhost');
  await page.getByLabel('Notes').fill('Prefers email.\nNo calls on Fridays.');
  await page.getByLabel('Seats').fill('5');
  const slider = page.locator('input[type=range]');
  await slider.focus();
  await page.keyboard.press('Home');
  for (let i = 0; i < 3; i++) await page.keyboard.press('ArrowRight');
  assert((await slider.inputValue()) === '6', `slider moved by keys: ${await slider.inputValue()}`);
  assert((await page.locator('.slider output').innerText()) === '6', 'the slider shows its value');
  await page.getByText('Yes', { exact: true }).click();
  await page.getByLabel('Plan').selectOption('enterprise');
  await page.getByText('EU', { exact: true }).click();
  await page.getByText('APAC', { exact: true }).click();
  await page.getByLabel('Start date').fill('2030-03-01');
  await page.getByLabel(/Kick-off call/).fill('2030-02-20T09:30');
  await page.getByLabel('Daily stand-up').fill('09:15');
  await page.getByRole('button', { name: 'Submit answer' }).click();
  await page.getByText('One answer needs fixing').waitFor();
  const emailField = page.locator('[data-field="email"]');
  assert((await emailField.locator('.error').innerText()).includes('Must be an email address'), 'the error is next to the email field');
  assert((await page.locator('[data-field="seats"] .error').count()) === 0, 'no error on a good field');
  // What was entered is kept.
  assert((await page.getByLabel('Contact email').inputValue()) === 'ops@localhost', 'email kept');
  assert((await page.getByLabel('Plan').inputValue()) === 'enterprise', 'plan kept');
  assert((await page.locator('input[type=range]').inputValue()) === '6', 'slider kept');
  assert(await page.getByRole('checkbox', { name: 'APAC' }).isChecked(), 'choices kept');
  assert((await page.getByLabel(/Kick-off call/).inputValue()) === '2030-02-20T09:30', 'date-time kept');
  await shot(page, '05-elicitation-invalid');
  let r = await agent('GET', `/api/elicitation-requests/${id}/result`);
  assert(r.status === 204, `still pending after the invalid answer: ${r.status}`);

  await page.getByLabel('Contact email').fill('ops@example.com');
  await page.getByRole('button', { name: 'Submit answer' }).click();
  await page.waitForURL(`${BASE}/inbox/requests/${id}?done=1`);
  await page.getByText('Your answer was recorded.').waitFor();
  await shot(page, '06-elicitation-answered');
  r = await agent('GET', `/api/elicitation-requests/${id}/result`);
  assert(r.status === 200, `answered: ${r.status}`);
  const f = r.body.fields;
  const expected = {
    email: 'ops@example.com', notes: 'Prefers email.\nNo calls on Fridays.', seats: 5, priority: 6,
    vip: true, plan: 'enterprise', regions: ['EU', 'APAC'], start: '2030-03-01',
    kickoff: '2030-02-20T09:30:00Z', standup: '09:15',
  };
  for (const [k, v] of Object.entries(expected)) {
    assert(JSON.stringify(f[k]) === JSON.stringify(v), `field ${k}: ${JSON.stringify(f[k])} != ${JSON.stringify(v)}`);
  }
});

step('decided requests leave the pending list and show in the history', async () => {
  await page.goto(`${BASE}/inbox`);
  const ids = await rowIds(page);
  assert(!ids.includes(state.approval) && !ids.includes(state.elicitation), `left the list: ${ids}`);
  assert(ids.includes(state.first), 'the undecided one stays');
  assert((await page.locator('#count').innerText()) === String(ids.length), 'the count matches');
  // The history, through the filter form (a GET form, no script needed).
  await page.getByLabel('Status').selectOption('decided');
  await page.getByRole('button', { name: 'Filter' }).click();
  await page.waitForURL(/status=decided/);
  const decided = await rowIds(page);
  assert(decided.includes(state.approval) && decided.includes(state.elicitation), `history: ${decided}`);
  await shot(page, '07-history');
});

step('a new request appears in the open list live (SSE)', async () => {
  await page.goto(`${BASE}/inbox`);
  await page.locator('#live.on').waitFor();
  // Mark this document: a reload would lose the mark, a live refresh keeps it.
  await page.evaluate(() => { window.__sameDocument = true; });
  const before = Number(await page.locator('#count').innerText());
  const id = await newApproval(state.taskId, { summary: 'Arrived while the list was open' });
  await page.locator(`a.row[data-id="${id}"]`).waitFor();
  assert(await page.evaluate(() => window.__sameDocument === true), 'refreshed in place, not reloaded');
  assert(Number(await page.locator('#count').innerText()) === before + 1, 'the count went up');
  assert((await rowIds(page))[0] === id, 'newest first');
  await shot(page, '08-live-arrival');
  state.live = id;
});

step('phone-sized screen', async () => {
  const phone = await context.newPage();
  await phone.setViewportSize({ width: 390, height: 844 });
  await phone.goto(`${BASE}/inbox`);
  const fits = await phone.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
  assert(fits, 'no horizontal scrolling on the list');
  const rowBox = await phone.locator('a.row').first().boundingBox();
  assert(rowBox && rowBox.height >= 44, `rows are large tap targets: ${JSON.stringify(rowBox)}`);
  await shot(phone, '09-phone-list');
  await phone.goto(`${BASE}/inbox/requests/${state.live}`);
  const fitsRequest = await phone.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
  assert(fitsRequest, 'no horizontal scrolling on a request');
  const button = await phone.getByRole('button', { name: 'Submit decision' }).boundingBox();
  assert(button && button.height >= 44 && button.width >= 300, `a full-width submit button: ${JSON.stringify(button)}`);
  const choice = await phone.locator('label.choice').first().boundingBox();
  assert(choice && choice.height >= 44, `outcome choices are large tap targets: ${JSON.stringify(choice)}`);
  await shot(phone, '10-phone-request');
  // Another reviewer's tab has the same request open.
  const other = await context.newPage();
  await other.goto(`${BASE}/inbox/requests/${state.live}`);
  await other.locator('#elsewhere[data-live="on"]').waitFor({ state: 'attached' });
  assert(await other.locator('#elsewhere').isHidden(), 'no notice while nobody decided');
  await other.getByLabel('Note').fill('typed before the other decision');
  // Decide it on the phone, with taps.
  await phone.getByText('Reject', { exact: true }).click();
  await phone.getByRole('button', { name: 'Submit decision' }).click();
  await phone.getByText('Your decision was recorded.').waitFor();
  await shot(phone, '11-phone-decided');
  await phone.close();
  // The other tab is told, without losing what was typed there.
  await other.locator('#elsewhere').waitFor({ state: 'visible' });
  assert((await other.getByLabel('Note').inputValue()) === 'typed before the other decision', 'typing kept');
  await shot(other, '12-decided-elsewhere');
  await other.close();
  const r = await agent('GET', `/api/approval-requests/${state.live}/result`);
  assert(r.status === 200 && r.body.outcome.type === 'REJECT', `rejected: ${JSON.stringify(r.body)}`);
  // The list still open in the first tab drops it live.
  await page.locator(`a.row[data-id="${state.live}"]`).waitFor({ state: 'detached' });
  assert(await page.evaluate(() => window.__sameDocument === true), 'left the list in place, not by a reload');
  await shot(page, '13-live-departure');
});

step('local times, the pending count in the title, and dismissing a stale request', async () => {
  const id = await newApproval(state.taskId, { summary: 'Asked twice, nobody will decide this' });
  await page.goto(`${BASE}/inbox`);
  const pending = Number(await page.locator('#count').innerText());
  await page.goto(`${BASE}/inbox/requests/${id}`);
  // Times are sent in UTC and shown in the reader's zone by the page's script.
  const time = page.locator('time[datetime]').first();
  assert((await time.getAttribute('data-local')) === '1', 'the time was converted');
  assert((await time.getAttribute('datetime')).endsWith('Z'), 'the instant is UTC');
  assert((await time.getAttribute('title')).endsWith('UTC'), 'the UTC time stays as the tooltip');
  assert((await page.title()).startsWith(`(${pending}) `), `the title counts ${pending}: ${await page.title()}`);
  await page.getByText('Dismiss this request').click();
  await page.getByLabel(/Reason/).fill('asked twice');
  await page.getByRole('button', { name: 'Dismiss request' }).click();
  await page.waitForURL(`${BASE}/inbox/requests/${id}?dismissed=1`);
  await page.getByText('The request was dismissed').waitFor();
  await shot(page, '14-dismissed');
  const r = await agent('GET', `/api/approval-requests/${id}/result`);
  assert(r.status === 409, `the agent reads a withdrawal: ${r.status}`);
});

step('sign out', async () => {
  await page.goto(`${BASE}/inbox`);
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByRole('heading', { name: 'Signed out' }).waitFor();
  const r = await page.goto(`${BASE}/inbox`);
  assert(r.status() === 401, `signed out: ${r.status()}`);
  assert((await page.content()).includes('login link'), 'the page says how to log in again');
});

let passed = 0;
let failed = 0;
for (const { name, fn } of steps) {
  try {
    await fn();
    passed++;
    console.log(`ok     ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAILED ${name}`);
    console.log(e && e.stack ? e.stack : e);
    const slug = name.replace(/[^a-z0-9]+/gi, '-').toLowerCase();
    await shot(page, `failed-${slug}`).catch(() => {});
  }
}
await context.close();
fs.rmSync(userDataDir, { recursive: true, force: true });
console.log(`browser: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
