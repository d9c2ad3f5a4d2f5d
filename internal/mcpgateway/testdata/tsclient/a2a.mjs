// Sends one message to the gateway's A2A endpoint with the A2A JavaScript
// SDK's client, as a platform agent retrying it would, and prints what each
// send returned as one JSON object; the Go suite asserts it, with the
// downstream's counts.
//
//   A2A_URL=http://127.0.0.1:PORT A2A_TOKEN=… MESSAGE_ID=… SKILL=… ARGUMENTS='{…}' SENDS=2 node a2a.mjs
//
// With UNTIL_SETTLED=1 it then sends the message again, every half second,
// until the task is completed, failed or rejected (at most a minute), as an
// agent whose answers were lost or came back in flight would.
import { ClientFactory } from '@a2a-js/sdk/client';
import { Role } from '@a2a-js/sdk';

const { A2A_URL, A2A_TOKEN, MESSAGE_ID, SKILL, ARGUMENTS, SENDS, UNTIL_SETTLED } = process.env;
const options = { serviceParameters: { Authorization: `Bearer ${A2A_TOKEN}` } };
const client = await new ClientFactory().createFromUrl(A2A_URL);

const message = {
  messageId: MESSAGE_ID,
  contextId: '',
  taskId: '',
  role: Role.ROLE_USER,
  parts: [{
    content: { $case: 'data', value: { skill: SKILL, arguments: JSON.parse(ARGUMENTS) } },
    metadata: undefined,
    filename: '',
    mediaType: 'application/json',
  }],
  metadata: undefined,
  extensions: [],
  referenceTaskIds: [],
};

// task is what a test asserts of a task: its id, state and metadata, and
// the data of its result artifact.
const task = (t) => ({
  id: t.id,
  state: t.status?.state,
  metadata: t.metadata,
  result: t.artifacts?.[0]?.parts?.[0]?.content?.value,
});

async function send() {
  try {
    const r = await client.sendMessage({ message, tenant: '' }, options);
    report.sends.push('status' in r ? task(r) : { message: r });
  } catch (e) {
    report.sends.push({ error: { code: e.envelopeCode, name: e.name, message: e.message } });
  }
}

// The A2A SDK's TaskState numbers of a task that will not change.
const settled = new Set([3, 4, 7]);
const report = { sends: [] };
for (let i = 0; i < Number(SENDS ?? 1); i++) await send();
for (let i = 0; UNTIL_SETTLED && i < 120 && !settled.has(report.sends.at(-1).state); i++) {
  await new Promise((resolve) => setTimeout(resolve, 500));
  await send();
}
const first = report.sends.find((s) => s.id);
if (first) report.got = task(await client.getTask({ id: first.id, tenant: '' }, options));
const card = await client.getAgentCard(options);
report.skills = card.skills.map((s) => s.id);
process.stdout.write(JSON.stringify(report));
