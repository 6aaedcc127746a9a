-- wrk script: GET /o/<n>.bin for n uniformly random in [0, OBJECTS), OBJECTS from the env.
local objects = tonumber(os.getenv("OBJECTS") or "2000")
math.randomseed(42)
request = function()
   return wrk.format("GET", "/o/" .. math.random(0, objects - 1) .. ".bin")
end
