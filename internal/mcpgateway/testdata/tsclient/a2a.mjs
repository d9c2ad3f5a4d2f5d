// Sends one message to the gateway's A2A endpoint with the A2A JavaScript
// SDK's client, as a platform agent retrying it would, and prints what each
// send returned as one JSON object; the Go suite asserts it, with the
// downstream's counts.
//
//   A2A_URL=http://127.0.0.1:PORT A2A_TOKEN=… MESSAGE_ID=… SKILL=… ARGUMENTS='{…}' SENDS=2 node a2a.mjs
import { ClientFactory } from '@a2a-js/sdk/client';
import { Role } from '@a2a-js/sdk';

const { A2A_URL, A2A_TOKEN, MESSAGE_ID, SKILL, ARGUMENTS, SENDS } = process.env;
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

const report = { sends: [] };
for (let i = 0; i < Number(SENDS ?? 1); i++) {
  try {
    const r = await client.sendMessage({ message, tenant: '' }, options);
    report.sends.push('status' in r ? task(r) : { message: r });
  } catch (e) {
    report.sends.push({ error: { code: e.envelopeCode, name: e.name, message: e.message } });
  }
}
const first = report.sends.find((s) => s.id);
if (first) report.got = task(await client.getTask({ id: first.id, tenant: '' }, options));
const card = await client.getAgentCard(options);
report.skills = card.skills.map((s) => s.id);
process.stdout.write(JSON.stringify(report));
