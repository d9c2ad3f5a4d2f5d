-- Argo CD health of a toolledger ToolAction, from its status.phase:
--   Progressing  in flight or waiting (no status yet, Pending, Accepted,
--                Executing, RetryScheduled, Unknown: the outcome is being
--                looked up downstream, never blindly repeated)
--   Suspended    AwaitingApproval: held until a ToolApproval is applied
--   Healthy      Succeeded: the effect happened once
--   Degraded     Failed, or Escalated: only a ToolResolution moves it on
local hs = {}

local function condition(conditionType)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == conditionType then
      return c
    end
  end
  return nil
end

-- The error the action records, as "Class (Reason): message".
local function describeError()
  local e = obj.status.error
  if e == nil then
    return nil
  end
  local text = (e.class or "") .. " (" .. (e.reason or "") .. ")"
  if e.message ~= nil and e.message ~= "" then
    text = text .. ": " .. e.message
  end
  return text
end

local function messageOf(conditionType, fallback)
  local c = condition(conditionType)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

if obj.status == nil or obj.status.phase == nil or obj.status.phase == "" then
  hs.status = "Progressing"
  hs.message = "Waiting for the toolledger manager to accept the action"
  return hs
end

local phase = obj.status.phase
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the toolledger manager to observe generation " .. generation
  return hs
end

if phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = messageOf("Succeeded", "Succeeded")
  return hs
end

if phase == "Failed" or phase == "Escalated" then
  hs.status = "Degraded"
  hs.message = phase .. ": " .. (describeError() or messageOf("Stalled", "no outcome recorded"))
  return hs
end

if phase == "AwaitingApproval" then
  hs.status = "Suspended"
  hs.message = messageOf("Approved", "Awaiting a ToolApproval of request digest " .. (obj.status.requestDigest or ""))
  return hs
end

-- Pending, Accepted, Executing, RetryScheduled, Unknown, and any phase a
-- newer manager adds: work towards an outcome is under way.
hs.status = "Progressing"
hs.message = phase
local detail = describeError() or messageOf("Reconciling", nil)
if detail ~= nil then
  hs.message = phase .. ": " .. detail
end
return hs
